"""The playground's HTTP side without a browser: its files are served without the key but with a
strict CSP, its JSON endpoints need the key, Host rules still apply, ``--disable-web-ui`` removes
it, ``pip install .`` ships the files, and the shipped example graphs are the compiler's output."""

from __future__ import annotations

import fnmatch
import types
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from radixlm.runtime.server.http_server import build_app
from radixlm.runtime.server_args import ServerArgs
from radixlm.web import example_programs

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "radixlm" / "web" / "static"


def _client(**overrides: object) -> TestClient:
    tokenizer_manager = types.SimpleNamespace(metrics=None, finish_hooks=[])
    app = build_app(tokenizer_manager, ServerArgs(model="m", **overrides))
    return TestClient(app, base_url="http://127.0.0.1")


def test_page_and_files_need_no_key_but_the_json_endpoints_do() -> None:
    client = _client(api_key="secret")
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "'unsafe-inline'" not in page.headers["content-security-policy"]
    js = client.get("/ui/chat.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert client.get("/ui/api/server").status_code == 401
    assert client.post("/ui/api/program", json={"graph": {}}).status_code == 401
    assert client.get("/v1/models").status_code == 401


def test_host_rules_hold_for_the_page() -> None:
    client = _client()
    assert client.get("/", headers={"Host": "evil.example"}).status_code == 421
    assert client.get("/ui/app.js", headers={"Host": "evil.example"}).status_code == 421


@pytest.mark.parametrize("path", ["/ui/../x.py", "/ui/nope.js", "/ui/%2e%2e/x.js", "/ui/api/nothing"])
def test_unknown_and_traversing_paths_are_404(path: str) -> None:
    assert _client().get(path).status_code == 404


def test_disable_web_ui_removes_the_page() -> None:
    client = _client(disable_web_ui=True)
    assert client.get("/").status_code == 404
    assert client.get("/ui/app.js").status_code == 404
    assert client.get("/ui/api/server").status_code == 404


def test_package_data_ships_every_static_file() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python >= 3.11")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["radixlm.web"]
    files = [p.relative_to(STATIC.parent).as_posix() for p in STATIC.rglob("*") if p.is_file()]
    assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files)
    assert not [p for p in STATIC.rglob("*") if p.is_dir()]  # "static/*" covers one level only


def test_shipped_example_graphs_are_the_compilers_output() -> None:
    assert example_programs.OUTPUT.read_text(encoding="utf-8") == example_programs.render(), (
        "run: python -m radixlm.web.example_programs"
    )


@pytest.mark.parametrize("value", ["0", "401", "lots", "²", "9" * 5000, "-1"])
def test_tree_cap_outside_its_range_is_a_400(value: str) -> None:
    response = _client().get("/ui/api/server", params={"max_nodes": value})
    assert response.status_code == 400 and "max_nodes" in response.json()["error"]["message"]
