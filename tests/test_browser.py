"""The course in a real browser: JupyterLab started by ``course.py lab``, driven with Playwright and Chromium.

Part 1 needs no browser: the panels' widgets are labelled in words, reachable by keyboard in
reading order, and take a decision once.

Part 2 starts ``python3 course.py lab FOLDER --no-browser --port P --IdentityProvider.token=T``
(as the README says) on copies, without outputs, of lessons 1 and 11 and of ``browser/panels.ipynb``,
opens them in Chromium and clicks through them as a learner would:

- lesson 1: its first cells run and a real reply of the model is shown;
- the approval panel: Deny runs nothing, Approve runs the call once (a double click and a click on
  the greyed-out button do not repeat it); progress bars and plots show while a run goes on;
- the same check on a copy whose Approve button does nothing must fail (the test can catch that);
- lesson 11: a question typed into the capstone's chat panel, sent from the keyboard, gets an answer.

Each step leaves a screenshot in ``build/screenshots/``. The committed notebooks are never
opened (JupyterLab saves what it opens), and JupyterLab's settings and workspaces go to the
temporary folder, not yours.

The browser is Debian's ``chromium`` (``apt-get install chromium``; ``.ci/run`` installs it when it
runs as root), or any Chromium or Chrome named by ``COURSE_CHROMIUM``: Playwright's own browser
download is not used. Without one the tests of part 2 are skipped and say why, unless
``COURSE_BROWSER_TEST=required`` (set by ``.ci/run``), which makes a missing browser a failure.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from course_lib.display.approval import WAITING, approval_panel
from course_lib.fake_model import ScriptedModel, calls, says
from course_lib.kiosk import Kiosk, KioskAgent, chat_panel
from course_lib.runtime import free_port

ROOT = Path(__file__).resolve().parents[1]
PRODUCTS = ROOT / "data" / "products.json"
PANELS = Path(__file__).parent / "browser" / "panels.ipynb"
SHOTS = ROOT / "build" / "screenshots"
LESSON_1, CAPSTONE = "01_the_wire.ipynb", "11_capstone.ipynb"
SABOTAGED = "panels_with_a_dead_approve_button.ipynb"


def later(run, name, arguments):
    return None  # "ask a person": the call is parked for the panel


# --- 1. the panels' widgets, without a browser -------------------------------------------


def parked_agent() -> tuple[KioskAgent, Kiosk]:
    """The capstone's agent with a refund and an e-mail parked, as ``browser/panels.ipynb`` makes them."""
    kiosk = Kiosk.load(PRODUCTS)
    script = ScriptedModel([calls("refund_order", order_id="ORD-1002", amount_jpy=6500), says("Waiting."),
                            calls("send_email", to="tanaka@example.jp", subject="ORD-1002", body="It ships today."),
                            says("Waiting.")])
    agent = KioskAgent(script, kiosk, reviewer=later, needs_approval=frozenset({"refund_order", "send_email"}))
    agent.ask("Please refund ORD-1002, it arrived broken.")
    agent.ask("Tell tanaka@example.jp that ORD-1002 ships today.")
    return agent, kiosk


def test_approval_buttons_say_in_words_what_they_do_and_come_in_reading_order():
    agent, kiosk = parked_agent()
    header, refund, email = approval_panel(agent.gate, kiosk.tools()).children
    for row, name in ((refund, "refund_order"), (email, "send_email")):
        shown, approve, deny, status = row.children  # the keyboard meets them in this order
        assert name in shown.value and (approve.description, deny.description) == ("Approve", "Deny")
        assert approve.tooltip.startswith("Approve: run " + name) and deny.tooltip.startswith("Deny: drop " + name)
        assert status.value == WAITING, "the state is written in words, not shown by a colour"
        assert approve.tabbable is not False and deny.tabbable is not False
    assert "2 call(s)" in header.value


def test_a_decision_is_written_out_and_taken_once():
    agent, kiosk = parked_agent()
    header, refund, email = approval_panel(agent.gate, kiosk.tools()).children
    refund.children[2].click()
    assert refund.children[3].value == "denied: not done" and kiosk.payments.refunds == []
    approve = email.children[1]
    approve.click()
    approve.click()  # a double click: the second reached the kernel before the buttons were greyed out
    assert len(kiosk.sent) == 1 and email.children[3].value == "approved: sent to tanaka@example.jp"
    assert all(button.disabled for row in (refund, email) for button in row.children[1:3])
    assert "0 call(s)" in header.value and kiosk.payments.refunds == []


def test_the_chat_panel_labels_its_box_says_when_it_works_and_gives_the_focus_back(monkeypatch):
    agent = KioskAgent(ScriptedModel([says("12 in Tokyo.")]), Kiosk.load(PRODUCTS))
    panel = chat_panel(agent)
    log, row, pending = panel.children
    box, send = row.children  # the keyboard meets the box, then Send, then the approval rows
    assert box.description == "Your question" and send.description == "Send" and send.tooltip
    seen: list[tuple[str, bool]] = []
    ask = agent.ask
    monkeypatch.setattr(agent, "ask", lambda request: seen.append((send.description, send.disabled)) or ask(request))
    focused: list[Any] = []
    monkeypatch.setattr(type(box), "focus", lambda widget: focused.append(widget))
    box.value = "How many SKU-00042 are in stock in Tokyo?"
    send.click()
    assert seen == [("Answering...", True)], "while the agent works, the button says so in words"
    assert (send.description, send.disabled) == ("Send", False) and focused == [box]
    assert "<b>kiosk:</b> 12 in Tokyo." in log.value


def test_in_a_japanese_kernel_the_panels_speak_japanese(monkeypatch):
    """COURSE_LANG=ja (a Japanese notebook's kernel): every label and state in Japanese; what the
    agent and the tools wrote, and the tool names, as they are."""
    from course_lib.display.words import WORDS

    assert set(WORDS["ja"]) == set(WORDS["en"]), "every word of the panels has its Japanese"
    monkeypatch.setenv("COURSE_LANG", "ja")
    agent, kiosk = parked_agent()
    header, refund, email = approval_panel(agent.gate, kiosk.tools(), "Tell tanaka@example.jp").children
    shown, approve, deny, status = refund.children
    assert (approve.description, deny.description, status.value) == ("承認", "却下", "あなたの判断を待っています")
    assert approve.tooltip.startswith("承認: refund_order") and "承認待ち" in header.value
    assert "ユーザーの依頼 (前の依頼):" in shown.value
    deny.click()
    assert refund.children[3].value == "却下しました: 実行していません"
    chat = KioskAgent(ScriptedModel([says("東京に 12 個あります。")]), Kiosk.load(PRODUCTS))
    log, row, _ = chat_panel(chat).children
    box, send = row.children
    assert (box.description, send.description) == ("質問", "送信")
    box.value = "SKU-00042 は東京に何個ありますか?"
    send.click()
    assert "<b>キオスク:</b> 東京に 12 個あります。" in log.value and "トークン" in log.value


def test_no_word_of_the_japanese_panels_is_english():
    from course_lib.display.figures import english_words
    from course_lib.display.words import WORDS

    for key, japanese in WORDS["ja"].items():
        words = english_words(re.sub(r"\{\w+(:[^}]*)?\}|<[^>]+>", "", japanese))  # placeholders and tags aside
        assert not [word for word in words if word != "SKU"], (key, japanese)


# --- 2. in JupyterLab, in Chromium ----------------------------------------------------------


def chromium() -> str | None:
    """The browser to drive: ``COURSE_CHROMIUM``, else a Chromium or Chrome on ``PATH``."""
    if named := os.environ.get("COURSE_CHROMIUM"):
        return named
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome",
                                                "google-chrome-stable"))), None)


def why_no_browser() -> str | None:
    """Why the browser tests cannot run here, or ``None`` if they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: `python3 course.py setup` installs the test tools"
    if os.name == "nt":
        return "the browser test runs on Linux (and macOS) only"
    if chromium() is None:
        return ("no Chromium here: `sudo apt-get install chromium` (Debian/Ubuntu) installs it, as .ci/run does "
                "when it runs as root; or set COURSE_CHROMIUM to a Chromium or Chrome. Playwright's own browser "
                "download is not used")
    return None


@dataclass
class Lab:
    url: str
    token: str
    folder: Path  # the copies of the notebooks that JupyterLab serves

    def cells(self, name: str) -> list[str]:
        return ["".join(cell["source"]) for cell in json.loads((self.folder / name).read_text())["cells"]]

    def cell(self, name: str, text: str) -> int:
        """The index of the first cell of notebook ``name`` whose source holds ``text``."""
        return next(i for i, source in enumerate(self.cells(name)) if text in source)


def copy_without_outputs(source: Path, target: Path, first: str | None = None) -> None:
    """A copy of a notebook with no outputs, counts or saved widget state (all it shows comes from
    this run), and ``first`` as an extra code cell at the top if given."""
    notebook = json.loads(source.read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    notebook["metadata"].pop("widgets", None)
    if first is not None:
        notebook["cells"].insert(0, {"cell_type": "code", "id": "sabotage", "metadata": {}, "outputs": [],
                                     "execution_count": None, "source": first})
    target.write_text(json.dumps(notebook, indent=1))


# The test of the test: the same clicks on a panel whose Approve button is dead must fail.
DEAD_APPROVE = """import ipywidgets

_on_click = ipywidgets.Button.on_click
ipywidgets.Button.on_click = lambda self, callback, remove=False: (
    None if self.description == "Approve" else _on_click(self, callback, remove))  # Approve does nothing"""

LAB_SETTINGS = {  # JupyterLab's settings for the test: no news, no autosave, every cell in the page
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[Lab]:
    """``python3 course.py lab`` on copies of the notebooks: headless, on a free port, with a token."""
    if reason := why_no_browser():
        if os.environ.get("COURSE_BROWSER_TEST") == "required":
            pytest.fail(f"the browser test must run here (COURSE_BROWSER_TEST=required), but {reason}")
        pytest.skip(f"browser test skipped: {reason}")
    place = tmp_path_factory.mktemp("lab")
    folder = place / "notebooks"
    folder.mkdir()
    (place / "data").symlink_to(ROOT / "data")  # the lessons read ../data, and only read it here
    for name in (LESSON_1, CAPSTONE):
        copy_without_outputs(ROOT / "notebooks" / name, folder / name)
    copy_without_outputs(PANELS, folder / PANELS.name)
    copy_without_outputs(PANELS, folder / SABOTAGED, first=DEAD_APPROVE)
    for plugin, values in LAB_SETTINGS.items():
        path = place / "settings" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(place / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(place / "workspaces")}
    log_path = place / "lab.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "course.py"), "lab", str(folder), "--no-browser", f"--port={port}",
             "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # course.py checks the install and the model first
        while not answers(f"{url}/api/status", token):
            assert process.poll() is None, f"course.py lab exited:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"JupyterLab did not answer:\n{log_path.read_text()[-3000:]}"
            time.sleep(0.5)
        yield Lab(url, token, folder)
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # course.py, JupyterLab, its kernels and their model servers
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def answers(url: str, token: str) -> bool:
    try:
        return httpx.get(url, headers={"Authorization": f"token {token}"}, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def browser(lab):
    """Chromium, headless, with one window size for every screenshot."""
    from playwright.sync_api import expect, sync_playwright
    expect.set_options(timeout=20_000)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium_browser = playwright.chromium.launch(executable_path=chromium(), headless=True)
        context = chromium_browser.new_context(viewport={"width": 1280, "height": 860})
        context.set_default_timeout(30_000)
        yield context
        chromium_browser.close()


def open_notebook(browser, lab: Lab, name: str):
    """Open ``name`` in a fresh JupyterLab window of its own (its own workspace, so no other tab
    comes back with it) and wait until its kernel is idle; return the window and the notebook."""
    from playwright.sync_api import expect
    for old in browser.pages:
        old.close()
    page = browser.new_page()
    page.goto(f"{lab.url}/lab/workspaces/{Path(name).stem}/tree/{name}?reset&token={lab.token}")
    notebook = page.locator(".jp-NotebookPanel:visible")
    expect(notebook.locator(".jp-Cell").first).to_be_visible(timeout=60_000)
    page.get_by_role("tab", name=re.compile("^File Browser")).click()  # fold the file browser away: more room
    expect(notebook.locator(".jp-Notebook-ExecutionIndicator")).to_have_attribute("data-status", "idle",
                                                                                   timeout=60_000)
    close_dialog(page, name)
    return page, notebook


def close_dialog(page, name: str) -> None:
    """A dialog JupyterLab opened by itself while the notebook loaded (on a busy machine one once
    covered the first cell, and every click after it failed): kept as a screenshot and its text
    printed (pytest shows it with a failure), then closed with Escape, as a learner would close
    it. What it said still decides the test: if the kernel did not start, the first cell fails."""
    dialog = page.locator(".jp-Dialog")
    try:
        dialog.first.wait_for(state="visible", timeout=2_000)
    except Exception:  # Playwright's TimeoutError: no dialog, the usual case
        return
    shoot(page, f"dialog-while-opening-{Path(name).stem}")
    print(f"JupyterLab opened a dialog while {name} loaded: {dialog.first.inner_text()!r}")
    page.keyboard.press("Escape")
    dialog.first.wait_for(state="hidden", timeout=10_000)


def run_cell(notebook, index: int, wait: bool = True, timeout: float = 180_000):
    """Select cell ``index`` with the mouse and run it with Ctrl+Enter, as a learner does; wait for its count.

    A key pressed while JupyterLab is still settling (just after it opened a notebook) can be
    lost; the cell's prompt turns to ``[*]`` as soon as a run is asked for, so a prompt that has
    not changed after a few seconds means the key was lost, and it is pressed again."""
    from playwright.sync_api import expect
    cell = notebook.locator(".jp-Cell").nth(index)
    prompt = cell.locator(".jp-InputPrompt")
    before = prompt.inner_text()
    for attempt in range(3):
        prompt.click()
        expect(cell).to_have_class(re.compile(r"\bjp-mod-active\b"))
        notebook.page.wait_for_function("document.activeElement?.classList.contains('jp-mod-active')")
        notebook.page.keyboard.press("Control+Enter")
        try:
            expect(prompt).not_to_have_text(before, timeout=5_000)
            break
        except AssertionError:
            if attempt == 2:
                raise
    if wait:
        expect(prompt).to_have_text(re.compile(r"\[\d+\]"), timeout=timeout)
    return cell


def shoot(page, name: str, target=None) -> Path:
    """A screenshot of the window, with ``target`` at the top, into ``build/screenshots``."""
    if target is not None:
        target.evaluate("element => element.scrollIntoView({block: 'start'})")
    page.mouse.move(0, 0)  # no hover effects or tooltips in the picture
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


@pytest.mark.model
def test_lesson_1_runs_in_jupyterlab_and_shows_a_real_reply(lab, browser):
    from playwright.sync_api import expect
    page, notebook = open_notebook(browser, lab, LESSON_1)
    connected = run_cell(notebook, lab.cell(LESSON_1, "client = connect()"))
    expect(connected.locator(".jp-OutputArea")).to_contain_text("Using the embedded server")
    sent = run_cell(notebook, lab.cell(LESSON_1, "response = httpx.post("))
    expect(sent.locator(".jp-OutputArea")).to_contain_text("200 application/json")
    shown = run_cell(notebook, lab.cell(LESSON_1, "reply = response.json()"))
    reply = json.loads(shown.locator(".jp-OutputArea-output").inner_text())
    assert reply["message"]["role"] == "assistant" and reply["message"]["content"].strip() and reply["done"]
    assert reply["eval_count"] > 0, "a real reply, with the model's own timings"
    shoot(page, "1-lesson-1-a-real-reply", shown)


def check_approval_panel(page, notebook, lab: Lab, name: str, shots: bool, patience: float = 10_000) -> None:
    """Deny the refund (nothing runs), approve the e-mail (sent once, whatever else is clicked).
    Each count is awaited up to ``patience`` ms."""
    from playwright.sync_api import expect
    count = lab.cell(name, "refunds made:")

    def counts(expected: str) -> None:
        expect(run_cell(notebook, count).locator(".jp-OutputArea-output")).to_have_text(expected, timeout=patience)

    panel = run_cell(notebook, lab.cell(name, "approval_panel(agent.gate"))
    refund, email = (panel.locator(".widget-hbox").filter(has_text=tool) for tool in ("refund_order(", "send_email("))
    expect(panel.locator(".jp-OutputArea")).to_contain_text("Waiting for approval: 2 call(s)")
    expect(refund).to_contain_text(WAITING)
    if shots:
        shoot(page, "2-approval-panel-waiting", panel.locator(".jp-OutputArea"))
    refund.get_by_role("button", name="Deny", exact=True).click()
    expect(refund).to_contain_text("denied: not done")
    counts("refunds made: 0; e-mails sent: 0")
    approve = email.get_by_role("button", name="Approve", exact=True)
    approve.dblclick()  # two clicks, the second before the buttons grey out
    counts("refunds made: 0; e-mails sent: 1")
    expect(email).to_contain_text("approved: sent to tanaka@example.jp")
    expect(approve).to_be_disabled()
    approve.click(force=True)  # and one more on the greyed-out button
    counts("refunds made: 0; e-mails sent: 1")
    if shots:
        shoot(page, "3-approval-panel-decided", panel.locator(".jp-OutputArea"))


@pytest.mark.model
def test_the_approval_panel_denies_and_approves_in_the_browser(lab, browser):
    page, notebook = open_notebook(browser, lab, PANELS.name)
    check_approval_panel(page, notebook, lab, PANELS.name, shots=True)


@pytest.mark.model
def test_the_browser_check_fails_when_approve_does_nothing(lab, browser):
    page, notebook = open_notebook(browser, lab, SABOTAGED)
    run_cell(notebook, lab.cell(SABOTAGED, "Approve does nothing"))
    with pytest.raises(AssertionError, match="e-mails sent: 1"):  # the count that never comes: wait less for it
        check_approval_panel(page, notebook, lab, SABOTAGED, shots=False, patience=3_000)
    shoot(page, "4-a-dead-approve-button-is-caught", notebook.locator(".jp-Cell").nth(2))


@pytest.mark.model
def test_progress_bars_and_plots_show_in_the_browser(lab, browser):
    from playwright.sync_api import expect
    page, notebook = open_notebook(browser, lab, PANELS.name)
    cell = run_cell(notebook, lab.cell(PANELS.name, "run_condition("), wait=False)
    bar = cell.locator(".jp-OutputArea .widget-hprogress .progress-bar")  # tqdm.auto draws an ipywidgets bar
    expect(bar).to_be_visible(timeout=60_000)
    expect(cell.locator(".jp-OutputArea")).to_contain_text("stand-in (16 requests)")
    shoot(page, "5-a-progress-bar-while-it-runs", cell)
    plot = cell.locator(".jp-OutputArea img")
    expect(plot).to_be_visible(timeout=60_000)
    assert plot.evaluate("image => image.naturalWidth") > 100, "the plot is a real picture"
    expect(bar).to_have_count(0)  # tqdm's leave=False: the bar goes when the run is done
    shoot(page, "6-a-plot", plot)


@pytest.mark.model
def test_the_capstone_chat_panel_answers_a_question_typed_in_the_browser(lab, browser):
    from playwright.sync_api import expect
    page, notebook = open_notebook(browser, lab, CAPSTONE)
    for text in ("model = connect()", "kiosk = Kiosk.load(DATA)", "from course_lib.fake_model import"):
        run_cell(notebook, lab.cell(CAPSTONE, text))
    cell = run_cell(notebook, lab.cell(CAPSTONE, "chat_panel(KioskAgent(model"))
    box = cell.get_by_label("Your question")
    send = cell.get_by_role("button", name="Send", exact=True)
    box.fill("Is SKU-00042 in stock in Tokyo?")
    page.keyboard.press("Tab")
    expect(send).to_be_focused()  # the keyboard goes from the question to Send
    page.keyboard.press("Enter")
    answer = cell.locator(".jp-OutputArea p").filter(has_text="kiosk:")
    expect(answer).to_be_visible(timeout=180_000)
    said = answer.inner_text().split("kiosk:", 1)[1].strip()
    assert said and not said.startswith("(stopped"), answer.inner_text()
    expect(box).to_be_focused()  # and comes back to the box for the next question
    expect(send).to_be_enabled()
    shoot(page, "7-capstone-chat-panel", cell.locator(".jp-OutputArea"))


# --- 3. a lesson's slides, in Chromium, with no network ------------------------------------------


def test_a_deck_opens_styled_and_starts_with_the_network_blocked(browser, tmp_path):
    """``course.py slides`` output as a room without a network opens it: every request other than a
    file of the deck's folder is refused, and reveal.js must still start with its theme."""
    from playwright.sync_api import expect

    from course_tools import slides
    (deck,) = slides.write_slides(tmp_path, [ROOT / "notebooks" / LESSON_1])
    asked, refused = [], []

    def only_files(route):
        asked.append(route.request.url)
        if route.request.url.startswith(f"file://{tmp_path}/"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort("internetdisconnected")

    for old in browser.pages:
        old.close()
    page = browser.new_page()
    page.route("**/*", only_files)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(deck.as_uri())
    expect(page.locator(".reveal.ready")).to_be_visible(timeout=20_000)  # reveal.js started
    font = page.evaluate("getComputedStyle(document.querySelector('.reveal')).fontFamily")
    assert "Source Sans Pro" in font, f"the theme's stylesheet did not apply: {font}"
    assert page.evaluate("document.fonts.check('42px \"Source Sans Pro\"')"), "the theme's font did not load"
    page.screenshot(path=str(SHOTS / "slides-offline.png"))
    page.keyboard.press("ArrowRight")  # reveal.js answers the keys: the next slide, in the address
    expect(page).to_have_url(re.compile(r"#/1$"))
    page.close()
    assert refused == [], f"the deck asked the network for {refused}"
    assert any(url.endswith("/assets/reveal.js/dist/reveal.js") for url in asked) and not errors, errors
