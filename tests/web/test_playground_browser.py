"""The playground in a real browser (headless Chromium via Selenium) against a live server with an
API key: the key is asked once, the chat streams the model's answer, constrained output is shown
validated, model output with HTML stays text, a program's graph completes with ``POST /program``'s
values, and the server view's radix tree grows after a request. Skipped where no Chromium is
installed. ``RADIXLM_WEB_SCREENSHOTS=<dir>`` saves a PNG of each page (the README's pictures);
``RADIXLM_WEB_TEST_MODEL`` serves another model (default: a tiny random Llama)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from radixlm.runtime.server.launch import ServerHandle, launch_server
from tests.helpers.browser import browser_errors, chromium_driver, wait_for

KEY = "web-test-key"
HTML_OUTPUT = '<script>document.title="pwned"</script><img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    browser = chromium_driver()  # skips before a server starts when there is no browser
    yield browser
    browser.quit()


@pytest.fixture(scope="module")
def server(tiny_llama_dir: str) -> Iterator[ServerHandle]:
    model = os.environ.get("RADIXLM_WEB_TEST_MODEL") or tiny_llama_dir
    with launch_server(
        model,
        api_key=KEY,
        enable_metrics=True,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.05,
        context_length=1024,
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def api(server: ServerHandle) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def page(driver: Any, server: ServerHandle) -> Any:
    """The playground, opened once the key was typed into the form it shows."""
    driver.get(server.url + "/")
    wait_for(driver, "return !document.getElementById('key-form').hidden", "the API key form")
    driver.find_element("id", "key-input").send_keys(KEY)
    driver.find_element("css selector", "#key-form button").click()
    wait_for(driver, "return document.body.dataset.ready === '1'", "the page to start")
    browser_errors(driver)  # drop the 401 that made the page ask for the key
    return driver


def _screenshot(driver: Any, name: str) -> None:
    folder = os.environ.get("RADIXLM_WEB_SCREENSHOTS")
    if folder:
        driver.save_screenshot(os.path.join(folder, f"playground-{name}.png"))


def _set(driver: Any, element_id: str, value: str) -> None:
    driver.execute_script("document.getElementById(arguments[0]).value = arguments[1]", element_id, value)


def _chat(driver: Any, prompt: str, mode: str = "none", constraint: str = "", max_tokens: int = 12) -> Any:
    """Send ``prompt`` in a fresh chat; the finished assistant message element."""
    driver.find_element("id", "clear").click()
    _set(driver, "mode", mode)
    _set(driver, "constraint", constraint)
    _set(driver, "max_tokens", str(max_tokens))
    driver.find_element("id", "prompt").send_keys(prompt)
    driver.find_element("id", "send").click()
    return wait_for(
        driver, "return document.querySelector('.msg.assistant[data-state=done]')", "the answer", 120
    )


def _tab(driver: Any, name: str) -> None:
    driver.find_element("css selector", f'.tab[data-tab="{name}"]').click()


def test_key_is_asked_once_and_kept_for_the_tab(page: Any) -> None:
    assert page.execute_script("return sessionStorage.getItem('radixlm-api-key')") == KEY
    page.refresh()
    wait_for(page, "return document.body.dataset.ready === '1'", "the page to start again")
    assert page.execute_script("return document.getElementById('key-form').hidden") is True
    assert page.find_element("id", "model").text


def test_chat_streams_the_models_greedy_answer(page: Any, api: httpx.Client) -> None:
    answer = _chat(page, "Hello there", max_tokens=12)
    assert answer.find_elements("css selector", ".verdict.bad") == []
    shown = answer.find_element("css selector", ".content").get_attribute("textContent")
    model = page.find_element("id", "model").text
    body = {"model": model, "messages": [{"role": "user", "content": "Hello there"}]}
    reference = api.post("/v1/chat/completions", json={**body, "temperature": 0, "max_tokens": 12})
    assert shown == reference.json()["choices"][0]["message"]["content"]
    assert int(answer.get_attribute("data-chunks")) >= 2  # arrived as deltas, not in one piece
    _screenshot(page, "chat")


def test_regex_and_json_schema_output_is_shown_validated(page: Any) -> None:
    regex = "[a-z]{2,4} [0-9]{2}"
    answer = _chat(page, "Name and age?", "regex", regex, max_tokens=16)
    shown = answer.find_element("css selector", ".content").get_attribute("textContent")
    assert re.fullmatch(regex, shown)
    assert answer.find_element("css selector", ".verdict.ok").text == "✓ matches the regex"
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    schema["additionalProperties"] = False
    answer = _chat(page, "Is it fine?", "json_schema", json.dumps(schema), max_tokens=40)
    shown = answer.find_element("css selector", ".content").get_attribute("textContent")
    assert isinstance(json.loads(shown)["ok"], bool)
    assert answer.find_element("css selector", ".verdict.ok").text == "✓ valid JSON for the schema"


def test_model_output_with_html_is_shown_as_text(page: Any) -> None:
    answer = _chat(page, "Say something", "regex", re.escape(HTML_OUTPUT).replace("\\ ", " "), 120)
    assert answer.find_element("css selector", ".content").get_attribute("textContent") == HTML_OUTPUT
    elements = "return document.querySelectorAll('#messages script, #messages img').length"
    assert page.execute_script(elements) == 0
    assert page.title == "radixlm playground"
    assert browser_errors(page) == []  # no script ran, nothing the CSP had to block


def test_program_runs_and_its_graph_completes(page: Any, api: httpx.Client) -> None:
    _tab(page, "program")
    graph = json.loads(page.find_element("id", "graph-json").get_attribute("value"))
    page.find_element("id", "run-program").click()
    wait_for(page, "return document.getElementById('graph').dataset.state === 'done'", "the program", 120)
    states = page.execute_script(
        "return [...document.querySelectorAll('#graph g.gnode')].map(g => g.dataset.state)"
    )
    assert states == ["done"] * len(graph["nodes"])
    rows = page.execute_script(
        "return [...document.querySelectorAll('#node-table tbody tr')]"
        ".map(r => [Number(r.cells[0].textContent), r.cells[2].textContent])"
    )
    reference = api.post("/program", json={"graph": graph}).json()["results"]
    assert sorted(rows) == sorted([r["node"], str(r["value"])] for r in reference)
    _screenshot(page, "program")


def test_tree_view_grows_after_a_request(page: Any, api: httpx.Client) -> None:
    _tab(page, "server")
    polls = "return Number(document.getElementById('server').dataset.polls || 0)"
    wait_for(page, polls + " >= 1", "the server view")
    before = int(page.find_element("id", "tree").get_attribute("data-nodes"))
    prompt = "A prompt the tree has never seen: zebra quartz."
    sampling = {"max_new_tokens": 4, "temperature": 0}
    assert api.post("/generate", json={"text": prompt, "sampling_params": sampling}).status_code == 200
    grown = f"return Number(document.getElementById('tree').dataset.nodes) > {before}"
    wait_for(page, grown, "the tree view to show the new request's node", 30)
    labels = page.execute_script(
        "return [...document.querySelectorAll('#tree text')].map(t => t.textContent)"
    )
    assert any("zebra" in label or "A prompt" in label for label in labels)
    assert len(page.find_elements("css selector", "#charts .chart")) >= 7
    assert page.find_elements("css selector", "#metrics table")  # --enable-metrics figures
    if os.environ.get("RADIXLM_WEB_SCREENSHOTS"):  # a few points on each chart for the picture
        seen = page.execute_script(polls)
        wait_for(page, f"{polls} >= {seen + 6}", "more polls")
    _screenshot(page, "server")
    assert browser_errors(page) == []


# ---- the page's JSON endpoints on the same live server (these run without a browser too) ----------


def test_server_view_json_is_bounded_and_names_holders(api: httpx.Client) -> None:
    for text in ("First prompt about apples.", "Second prompt about pears."):
        api.post("/generate", json={"text": text, "sampling_params": {"max_new_tokens": 2}})
    view = api.get("/ui/api/server", params={"max_nodes": 1}).json()
    assert len(view["tree"]["nodes"]) == 2 and view["tree"]["truncated"] is True
    assert view["tree"]["nodes"][0]["parent"] is None and view["tree"]["nodes"][1]["parent"] == 0
    assert view["batch"] == [] and view["kv_total"] > 0
    full = api.get("/ui/api/server").json()["tree"]["nodes"]
    assert any(n["text"].startswith("First") for n in full) and all(n["held_by"] == [] for n in full)
    assert api.get("/ui/api/server", params={"max_nodes": "lots"}).status_code == 400


def test_program_stream_sends_one_event_per_node_then_done(api: httpx.Client) -> None:
    from radixlm.web.example_programs import OUTPUT

    graph = json.loads(OUTPUT.read_text())[0]["graph"]
    with api.stream("POST", "/ui/api/program", json={"graph": graph}) as response:
        assert response.status_code == 200
        events = [json.loads(line) for line in response.iter_lines() if line]
    ran = [n["id"] for n in graph["nodes"] if n["op"] and n["op"]["type"] in ("gen", "select")]
    assert sorted(e["node"] for e in events[:-1]) == ran and events[-1] == {"event": "done"}
    assert all(e["event"] == "node" for e in events[:-1])
    assert api.post("/ui/api/program", json={"graph": {"nodes": "x"}}).status_code == 400
    assert api.get("/ui/api/server").json()["num_pinned_contexts"] == 0  # pins released at the end
