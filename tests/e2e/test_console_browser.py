"""The console at /ui in a real browser (Debian's chromium through Playwright)
against real `inferd serve` and `inferd router` processes: the key asked for
once, a streamed chat answer and a stopped one, the dashboard moving with
traffic, a key created and its secret shown once, a pull with its progress,
the router's fleet, and every page at 1280 and 390 pixels wide (screenshots
under the test's temporary folder; nothing wider than the window)."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest

from browser import Browser
from conftest import TENANT_ADMIN
from router_process import RouterProcess

SERVER_PAGES = ("chat", "dashboard", "models", "requests", "keys")
WIDTHS = (1280, 390)
STATS = re.compile(r"^(\d+) tokens · [\d.]+ tokens/s · first token \d+ ms · (\d+) prompt tokens")


@pytest.fixture(scope="module")
def browser():
    with Browser.launch() as b:
        yield b


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("console-screenshots")


def sign_in(page, server, key: str = TENANT_ADMIN, tab: str = "chat") -> None:
    page.goto(f"{server.base_url}/ui/#{tab}")
    page.wait_for_selector("#key-dialog[open]")
    page.fill("#key-dialog-input", key)
    page.press("#key-dialog-input", "Enter")
    page.wait_for_selector("#key-dialog", state="hidden")


@pytest.fixture(scope="module")
def console(browser, tenant_server):
    """One page on the keyed server, signed in with its admin key, shared by the tests below in order."""
    page = browser.page(1280)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    sign_in(page, tenant_server)
    yield page
    assert not errors, errors  # no script error on any page, ever
    page.context.close()


@pytest.fixture(scope="module")
def batch(tenant_server):
    """A two-item batch, made by the first test that names it, so that it has run by the time its own test looks."""
    lines = [json.dumps({"custom_id": f"console-{i}", "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}})
             for i in range(2)]
    with tenant_server.openai() as client:
        uploaded = client.files.create(file=("console.jsonl", "\n".join(lines).encode()), purpose="batch")
        return client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                     completion_window="24h")


def admin_http(server) -> httpx.Client:
    return server.http(headers={"Authorization": f"Bearer {TENANT_ADMIN}"}, timeout=30)


def cards(server) -> list[dict]:
    with admin_http(server) as http:
        return http.get("/v1/requests").json()["data"]


def latest_card(server) -> dict:
    return cards(server)[0]


def wait_js(page, expression: str, timeout: float = 30.0):
    """Until `expression` is truthy in the page. Playwright's wait_for_function compiles its
    predicate inside the page, which the console's CSP forbids (no eval); evaluate does not."""
    deadline = time.monotonic() + timeout
    while not (value := page.evaluate(expression)):
        assert time.monotonic() < deadline, f"not true after {timeout} s: {expression}"
        time.sleep(0.05)
    return value


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= innerWidth")


def test_the_page_asks_for_a_key_once_and_sends_it_as_bearer(browser, tenant_server):
    page = browser.page(1280)
    sent = []
    page.on("request", lambda r: sent.append((r.url, r.headers.get("authorization"))))
    page.goto(f"{tenant_server.base_url}/ui/")
    page.wait_for_selector("#key-dialog[open]")
    assert "needs an API key" in page.inner_text("#key-dialog-reason")
    page.fill("#key-dialog-input", "not-a-key")
    page.press("#key-dialog-input", "Enter")
    wait_js(page, "document.getElementById('key-dialog-reason').textContent.includes('refused')")
    page.fill("#key-dialog-input", TENANT_ADMIN)
    page.click("#key-dialog button[type=submit]")
    page.wait_for_selector("#chat-model option[value=tiny]", state="attached")
    for tab in ("dashboard", "keys", "requests"):
        page.click(f"#tabs a[data-page={tab}]")
        page.wait_for_selector(f"#page-{tab}", state="visible")
    assert page.evaluate("sessionStorage.getItem('inferd.key')") == TENANT_ADMIN
    assert not page.is_visible("#key-dialog")  # asked once
    api_calls = [(u, a) for u, a in sent if "/ui/" not in u]
    assert api_calls and api_calls[-1][1] == f"Bearer {TENANT_ADMIN}"
    assert {a for _, a in api_calls} <= {None, "Bearer not-a-key", f"Bearer {TENANT_ADMIN}"}
    page.context.close()


def test_chat_streams_an_answer_with_its_numbers_and_keeps_the_conversation(console, tenant_server, batch):
    page = console
    page.fill("#chat-max-tokens", "64")
    page.fill("#chat-temperature", "0")
    page.fill("#chat-input", "Tell me about **cats**")
    # Watched in the page, however fast the answer comes: text appears while Stop is still live.
    page.evaluate("""() => {
        window.sawStreaming = false;
        new MutationObserver(() => {
            const body = document.querySelector('.message.assistant .body');
            if (body?.textContent.length && !document.getElementById('chat-stop').disabled) window.sawStreaming = true;
        }).observe(document.getElementById('chat-log'), {childList: true, subtree: true, characterData: true});
    }""")
    page.press("#chat-input", "Enter")
    page.wait_for_selector(".message.assistant .stats")  # then the numbers under it
    assert page.evaluate("window.sawStreaming")
    stats = STATS.match(page.inner_text(".message.assistant .stats"))
    card = latest_card(tenant_server)
    assert card["route"] == "/v1/chat/completions" and card["state"] == "done"
    assert stats and int(stats[1]) == card["usage"]["completion_tokens"]
    assert int(stats[2]) == card["usage"]["prompt_tokens"]
    answer = page.inner_text(".message.assistant .body")
    page.reload()  # kept in the browser
    page.wait_for_selector(".message.assistant .stats")
    assert page.inner_text(".message.user .body") == "Tell me about **cats**"
    assert page.inner_text(".message.assistant .body") == answer


MARKDOWN = """# Title
Some **bold**, *slanted* and `inline code`, a [link](https://example.com/a) and [no link](javascript:alert(1)).
<img src=x onerror=alert(1)>

- one
- two

```python
print("<b>hi</b>")
```"""


def test_answers_render_as_markdown_and_never_as_html(console):
    html = console.evaluate("""src => import('./markdown.js').then((m) => {
        const box = document.createElement('div');
        box.append(m.renderMarkdown(src));
        return box.innerHTML;
    })""", MARKDOWN)
    assert html.startswith("<h3>Title</h3><p>Some <strong>bold</strong>, <em>slanted</em> and <code>inline code</code>")
    assert '<a href="https://example.com/a" rel="noopener noreferrer" target="_blank">link</a>' in html
    assert "[no link](javascript:alert(1))" in html and "<img" not in html and "&lt;img src=x" in html
    assert "<ul><li>one</li><li>two</li></ul>" in html
    assert ('<figure class="code"><figcaption><span>python</span><button type="button" class="copy quiet">Copy code'
            '</button></figcaption><pre tabindex="0"><code>print("&lt;b&gt;hi&lt;/b&gt;")</code></pre></figure>') in html


def test_stop_ends_a_long_answer(console, tenant_server):
    page = console
    page.click("#chat-clear")
    assert page.locator(".message").count() == 0
    page.fill("#chat-max-tokens", "350")  # with the prompt, within the server's 512 positions
    page.fill("#chat-input", "Go on")
    page.press("#chat-input", "Enter")
    wait_js(page, "document.querySelector('.message.assistant .body')?.textContent.length > 0 "
                  "|| document.querySelector('.message.assistant .error')")
    assert page.locator(".message.assistant .error").count() == 0
    page.click("#chat-stop")
    page.wait_for_selector(".message.assistant .stats")
    assert page.inner_text(".message.assistant .stats").endswith("stopped")
    assert page.is_disabled("#chat-stop") and page.is_enabled("#chat-send")
    deadline = time.monotonic() + 10
    while (card := latest_card(tenant_server))["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert card["state"] == "disconnected"  # the server aborted the work when the page let go
    assert card["usage"]["completion_tokens"] < 350


def test_the_dashboard_moves_with_traffic(console, tenant_server):
    page = console
    page.click("#tabs a[data-page=dashboard]")
    wait_js(page, "/^[\\d,]+$/.test(document.getElementById('stat-generated').textContent)")
    before = int(page.inner_text("#stat-generated").replace(",", ""))
    with admin_http(tenant_server) as http:
        r = http.post("/v1/completions", json={"model": "tiny", "prompt": "count", "max_tokens": 8, "temperature": 0,
                                               "ignore_eos": True})
        assert r.status_code == 200
    wait_js(page, "Number(document.getElementById('stat-generated').textContent.replace(/,/g, '')) >= "
                           f"{before + 8}")
    assert int(page.inner_text("#stat-generated").replace(",", "")) == before + 8
    assert page.inner_text("#dashboard-table tbody tr td:first-child") == "tiny"
    wait_js(page, "/ms \\/ .* ms/.test(document.querySelector('#dashboard-table td[data-label^=\"TTFT\"]').textContent)")
    assert page.get_attribute(".chart svg", "aria-label").startswith("Tokens per second: generated")


def test_a_request_card_cancels_its_request(console, tenant_server):
    page = console
    page.click("#tabs a[data-page=chat]")
    ended = {}

    def long_stream():
        body = {"model": "tiny", "prompt": "go", "max_tokens": 480, "ignore_eos": True, "stream": True}
        with admin_http(tenant_server) as http, http.stream("POST", "/v1/completions", json=body) as r:
            ended["lines"] = [line for line in r.iter_lines() if line.startswith("data: ")]

    thread = threading.Thread(target=long_stream)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not any(c["state"] == "running" for c in cards(tenant_server)) and time.monotonic() < deadline:
            time.sleep(0.02)
        page.click("#tabs a[data-page=requests]")  # the page asks for the cards at once
        button = page.locator("#request-cards li.running button", has_text="Cancel")
        button.first.wait_for(timeout=30_000)
        request_id = button.first.get_attribute("aria-label").removeprefix("Cancel request ")
        button.first.click()
    finally:
        thread.join(30)
    assert any("error" in line for line in ended["lines"][-2:]), (ended["lines"][-3:], latest_card(tenant_server))
    page.locator(f"#request-cards li.cancelled[data-id='{request_id}']").wait_for()
    assert latest_card(tenant_server)["state"] == "cancelled"


def test_a_batch_shows_its_progress_and_results(console, batch):
    page = console
    page.click("#tabs a[data-page=requests]")
    row = page.locator("#jobs-table tr", has_text=batch.id)
    row.wait_for()
    wait_js(page, f"[...document.querySelectorAll('#jobs-table tr')].some((tr) => tr.textContent.includes("
                  f"{batch.id!r}) && tr.textContent.includes('completed') && tr.textContent.includes('2/2'))")
    page.get_by_role("button", name=f"Show the results of job {batch.id}").click()
    page.wait_for_selector("#job-result", state="visible")
    result = page.inner_text("#job-result")
    assert result.startswith(f"batch {batch.id}") and '"custom_id": "console-0"' in result.replace('":"', '": "')
    assert '"console-1"' in result


def test_a_new_key_is_shown_once(console, tenant_server):
    page = console
    page.click("#tabs a[data-page=keys]")
    page.wait_for_selector("#keys-table tbody tr")
    page.fill("#key-name", "console-made")
    page.fill("#key-rpm", "60")
    page.click("#key-create")
    page.wait_for_selector("#key-secret", state="visible")
    secret = page.inner_text("#key-secret-value")
    assert page.inner_text("#key-secret-name") == "console-made" and len(secret) > 20
    with tenant_server.http(headers={"Authorization": f"Bearer {secret}"}) as http:
        assert http.get("/v1/models").status_code == 200  # the secret works
    row = page.locator("#keys-table tr", has_text="console-made")
    row.wait_for()
    assert "rpm 60" in row.inner_text()
    page.get_by_role("button", name="Edit the models and limits of console-made").click()
    assert page.input_value("#key-rpm") == "60" and page.is_editable("#key-rpm")
    page.fill("#key-rpm", "30")
    page.fill("#key-scopes", "tiny")
    page.click("#key-create")  # now "Save console-made"
    wait_js(page, "[...document.querySelectorAll('#keys-table tr')].some((tr) => "
                  "tr.textContent.includes('console-made') && tr.textContent.includes('rpm 30'))")
    with admin_http(tenant_server) as http:
        made = next(k for k in http.get("/api/keys").json()["data"] if k["name"] == "console-made")
    assert made["limits"]["rpm"] == 30 and made["scopes"] == ["tiny"]
    page.click("#key-copy")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    page.click("#key-secret-done")
    assert secret not in page.content()
    page.reload()
    page.wait_for_selector("#keys-table tr:has-text('console-made')")
    assert secret not in page.content()  # shown once: the listing never holds it
    page.get_by_role("button", name="Rotate console-made").click()
    page.wait_for_selector("#key-secret", state="visible")
    rotated = page.inner_text("#key-secret-value")
    page.get_by_role("button", name="Disable console-made").click()
    page.get_by_role("button", name="Enable console-made").wait_for()
    with tenant_server.http() as http:
        status = {s: http.get("/v1/models", headers={"Authorization": f"Bearer {s}"}).status_code
                  for s in (secret, rotated)}
    assert rotated != secret and status == {secret: 401, rotated: 401}  # the old one rotated away, the new disabled
    delete = page.locator("#keys-table tr", has_text="console-made").get_by_role("button", name="Delete console-made")
    delete.click()
    delete.click()  # asks once more
    wait_js(page, "!document.getElementById('keys-table').textContent.includes('console-made')")


def test_every_page_fits_both_widths_and_is_labelled(console, shots):
    page = console
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for tab in SERVER_PAGES:
            page.click(f"#tabs a[data-page={tab}]")
            page.wait_for_selector(f"#page-{tab}", state="visible")
            page.wait_for_timeout(150)  # the page's first poll has drawn
            page.screenshot(path=str(shots / f"server-{tab}-{width}.png"), full_page=True)
            assert fits(page), f"{tab} is wider than {width} px"
    unlabelled = page.evaluate("""[...document.querySelectorAll('input, select, textarea, button, progress')]
        .filter((el) => !(el.labels?.length || el.getAttribute('aria-label') || el.textContent.trim()
                          || el.getAttribute('aria-labelledby')))
        .map((el) => el.id || el.outerHTML)""")
    assert unlabelled == []


def test_keyboard_alone_reaches_the_pages(console):
    page = console
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(page.url.split("#")[0] + "#chat")
    page.reload()  # focus starts at the top of the document
    page.wait_for_selector("#page-chat", state="visible")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.page") == "dashboard"
    page.keyboard.press("Enter")
    page.wait_for_selector("#page-dashboard", state="visible")
    assert page.get_attribute("#tabs a[data-page=dashboard]", "aria-current") == "page"


def test_a_pull_shows_its_progress(browser, store_server, hub, tmp_path, shots):
    from hub_server import small_gguf

    # 24 MiB: the hub client reports progress every 10 MB it reads, so a smaller file jumps from 0 to done.
    hub.add_repo("acme/Console-GGUF", {"Console-Q4_K_M.gguf": small_gguf(tmp_path / "console.gguf", rows=6144)})
    page = browser.page(1280)
    page.goto(f"{store_server.base_url}/ui/#models")  # no keys on this server: no dialog
    page.wait_for_selector("#models-table tbody tr")
    page.fill("#pull-name", "acme/Console-GGUF:Q4_K_M")
    hub.pace = 0.0005  # a pause after each 16 KiB: about a second in all
    try:
        page.click("#pull-start")
        seen = set()
        deadline = time.monotonic() + 30
        while not page.inner_text("#pull-label").startswith(("Pulled", "Pull failed")) and time.monotonic() < deadline:
            value, top = page.evaluate("(p => [p.value, p.max])(document.getElementById('pull-progress'))")
            seen.add(0 < value < top)
            time.sleep(0.05)
    finally:
        hub.pace = 0.0
    assert page.inner_text("#pull-label") == "Pulled acme/Console-GGUF:Q4_K_M"
    assert True in seen  # the bar was seen part way
    assert page.evaluate("(p => p.value === p.max)(document.getElementById('pull-progress'))")
    steps = page.locator("#pull-log li").all_inner_texts()
    assert steps[0] == "pulling manifest" and "pulling Console-Q4_K_M.gguf" in steps and steps[-1] == "success"
    row = page.locator("#models-table tr", has_text="acme/Console-GGUF:Q4_K_M")
    row.wait_for()
    assert "Q4_K_M" in row.inner_text() and "stored" in row.inner_text()
    page.screenshot(path=str(shots / "server-models-pulled-1280.png"), full_page=True)
    delete = row.get_by_role("button", name="Delete acme/Console-GGUF:Q4_K_M")
    delete.click()
    delete.click()  # asks once more
    wait_js(page, "!document.getElementById('models-table').textContent.includes('Console-GGUF')")
    page.context.close()


@pytest.mark.slow  # loads the bundled 270M model: ~10 s
def test_a_stored_model_loads_and_unloads(browser, store_server):
    page = browser.page(1280)
    page.goto(f"{store_server.base_url}/ui/#models")
    page.get_by_role("button", name="Load gemma-3-270m:latest").click()
    page.get_by_role("button", name="Unload gemma-3-270m:latest").wait_for(timeout=120_000)
    with store_server.http() as http:
        assert "gemma-3-270m" in [m["name"] for m in http.get("/api/ps").json()["models"]]
    page.get_by_role("button", name="Unload gemma-3-270m:latest").click()
    page.get_by_role("button", name="Load gemma-3-270m:latest").wait_for(timeout=30_000)
    with store_server.http() as http:
        assert "gemma-3-270m" not in [m["name"] for m in http.get("/api/ps").json()["models"]]
    page.context.close()


def test_the_router_console_lists_its_fleet(browser, tenant_server, store_server, server_logs, shots):
    workers = sorted([tenant_server.base_url, store_server.base_url])
    with RouterProcess(workers=workers, worker_api_key=TENANT_ADMIN, log_path=server_logs / "console-router.log") as router:
        page = browser.page(1280)
        page.goto(f"{router.base_url}/ui/#fleet")
        wait_js(page, "document.querySelectorAll('#fleet-table tbody tr').length === 2")
        rows = page.locator("#fleet-table tbody tr").all_inner_texts()
        assert [next(u for u in workers if u in r) for r in rows] == workers
        assert all("ready" in r and "closed" in r for r in rows)
        assert page.is_hidden("#tabs a[data-page=models]")  # a router has no store of its own
        page.get_by_role("button", name=f"Cache view of {workers[0]}").click()
        wait_js(page, f"document.getElementById('cache-view').textContent.startsWith({workers[0]!r})")
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            for tab in ("fleet", "dashboard"):
                page.click(f"#tabs a[data-page={tab}]")
                page.wait_for_selector(f"#page-{tab}", state="visible")
                page.wait_for_timeout(150)
                page.screenshot(path=str(shots / f"router-{tab}-{width}.png"), full_page=True)
                assert fits(page), f"the router's {tab} is wider than {width} px"
        assert page.inner_text("#stat-routable") == "2"
        page.context.close()
