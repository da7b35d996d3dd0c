"""Twenty tools with varied parameter schemas (the always-parsing tool call tests and benchmark)."""

from __future__ import annotations

from typing import Any


def _obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
    }


SCHEMAS: dict[str, dict[str, Any]] = {
    "get_weather": _obj(
        {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}
    ),
    "add": _obj({"a": {"type": "integer"}, "b": {"type": "integer"}}),
    "set_alarm": _obj(
        {
            "hour": {"type": "integer", "minimum": 0, "maximum": 23},
            "minute": {"type": "integer", "minimum": 0, "maximum": 59},
        }
    ),
    "search_web": _obj(
        {"query": {"type": "string", "maxLength": 40}, "max_results": {"type": "integer"}}, ["query"]
    ),
    "toggle_light": _obj(
        {"room": {"type": "string", "enum": ["kitchen", "bedroom", "hall"]}, "on": {"type": "boolean"}}
    ),
    "convert_currency": _obj(
        {
            "amount": {"type": "number"},
            "from": {"type": "string", "enum": ["USD", "EUR"]},
            "to": {"type": "string", "enum": ["USD", "EUR", "JPY"]},
        }
    ),
    "send_email": _obj(
        {
            "to": {"type": "string", "maxLength": 30},
            "subject": {"type": "string", "maxLength": 30},
            "urgent": {"type": "boolean"},
        },
        ["to", "subject"],
    ),
    "now": {"type": "object", "properties": {}},
    "tag_photo": _obj(
        {"tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}}
    ),
    "book_table": _obj(
        {
            "restaurant": {"type": "string", "maxLength": 30},
            "party": {"type": "integer", "minimum": 1, "maximum": 12},
            "time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"},
        }
    ),
    "rate_movie": _obj(
        {"title": {"type": "string", "maxLength": 30}, "stars": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}
    ),
    "create_user": _obj(
        {
            "user": _obj(
                {
                    "name": {"type": "string", "maxLength": 20},
                    "age": {"type": "integer", "minimum": 0, "maximum": 130},
                }
            )
        }
    ),
    "set_volume": _obj({"level": {"type": "number", "minimum": 0, "maximum": 10}}),
    "translate": _obj(
        {
            "text": {"type": "string", "maxLength": 40},
            "target": {"type": "string", "enum": ["fr", "de", "es"]},
        }
    ),
    "order_pizza": _obj(
        {
            "size": {"type": "string", "enum": ["s", "m", "l"]},
            "toppings": {
                "type": "array",
                "items": {"type": "string", "enum": ["cheese", "ham", "olive"]},
                "maxItems": 3,
            },
        }
    ),
    "schedule": _obj(
        {
            "day": {"type": "string", "enum": ["mon", "tue", "wed"]},
            "repeat": {"type": "boolean"},
            "note": {"type": ["string", "null"], "maxLength": 20},
        },
        ["day", "repeat"],
    ),
    "lookup_stock": _obj({"ticker": {"type": "string", "pattern": "^[A-Z]{1,5}$"}}),
    "route": _obj(
        {"start": _obj({"lat": {"type": "number"}, "lon": {"type": "number"}}), "mode": {"const": "walk"}}
    ),
    "count_words": _obj({"text": {"type": "string", "maxLength": 60}}),
    "random_numbers": _obj(
        {
            "count": {"type": "integer", "minimum": 1, "maximum": 5},
            "seed": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        }
    ),
}


def tool(name: str, description: str = "") -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or name.replace("_", " "),
            "parameters": SCHEMAS[name],
        },
    }
