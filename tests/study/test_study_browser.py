"""End to end in real headless Chromium (Debian's /usr/bin/chromium driven by Playwright): open a
rater's link, rate every suggestion of a 20-query study with the keyboard, reload mid-way, kill
the server with SIGKILL mid-way and keep rating while it is down, restart it, finish, then check
the database and the analysis counts against what was typed. Fails (never skips) when Chromium
or Playwright is missing: `.ci/run` installs both through scripts/setup.sh."""
from __future__ import annotations

import hashlib
import shutil
import signal
from pathlib import Path

import pytest

from test_study import MODELS, make_study, q, serve_process, token_of

from backretrieval.study.analyze import analyze

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (scripts/setup.sh does: apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright (Python) is not installed: pip install -e '.[study,test]' (scripts/setup.sh does)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield b
        finally:
            b.close()


def score_for(sid: str) -> int:
    """The test rater's score of a suggestion: fixed by its id, independent of the models."""
    return 1 + hashlib.sha256(sid.encode()).digest()[0] % 4


def test_rate_everything_with_keyboard_reload_and_server_crash(browser, tmp_path, shared_data):
    db = make_study(tmp_path / "study.db", shared_data)
    token = token_of(db)
    total = q(db, "SELECT COUNT(*) FROM suggestions")[0][0]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    bodies: list[bytes] = []

    def keep_body(r):
        if r.ok and "/img/" not in r.url:
            try:
                bodies.append(r.body())
            except Exception:  # a response the page navigated away from (reload): body gone
                pass

    page.on("response", keep_body)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    typed: dict[str, int] = {}

    def focused() -> str:
        return page.get_attribute(".sugg.focus", "data-sid")

    def wait_saved():
        page.wait_for_selector("body[data-pending='0']", timeout=30_000)

    def rate_query(qi: int, *, waiting: bool = True):
        assert page.get_attribute("body", "data-query") == str(qi)
        n = page.locator(".sugg").count()
        for _ in range(n):
            sid = focused()
            assert sid not in typed
            typed[sid] = score_for(sid)
            page.keyboard.press(str(typed[sid]))
        if waiting:
            wait_saved()
            assert page.locator(".sugg[data-state='saved']").count() == n
        page.keyboard.press("Enter")

    with serve_process(db) as (proc, port):
        url = f"http://127.0.0.1:{port}/r/{token}"
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']")
        assert page.get_attribute("body", "data-total") == str(total)
        assert page.inner_text("#progress-text").startswith(f"0 / {total} rated")

        # query 1: rate one suggestion, go back up to it with the keyboard and change the score
        first = focused()
        page.keyboard.press("4")
        page.keyboard.press("k")
        assert focused() == first
        page.keyboard.press("2")
        typed[first] = 2  # overwrites the 4
        wait_saved()
        assert page.get_attribute(f".sugg[data-sid='{first}']", "data-score") == "2"
        for _ in range(page.locator(".sugg").count() - 1):
            sid = focused()
            typed[sid] = score_for(sid)
            page.keyboard.press(str(typed[sid]))
        wait_saved()
        page.keyboard.press("Enter")
        for qi in range(1, 10):
            rate_query(qi)

        # reload mid-way: nothing lost, and the page resumes at the first unrated query
        done_before = len(typed)
        page.reload()
        page.wait_for_selector("body[data-ready='1']")
        assert page.get_attribute("body", "data-rated") == str(done_before)
        assert page.get_attribute("body", "data-query") == "10"
        assert page.locator(".sugg[data-state='saved']").count() == 0
        for qi in range(10, 15):
            rate_query(qi)
        proc.send_signal(signal.SIGKILL)  # the server crashes
        proc.wait()

    # rate while the server is down: the page keeps the clicks and retries
    n_down = 3
    for _ in range(n_down):
        sid = focused()
        typed[sid] = score_for(sid)
        page.keyboard.press(str(typed[sid]))
    page.wait_for_selector("#save-status.error", timeout=10_000)
    assert int(page.get_attribute("body", "data-pending")) >= 1
    stored = q(db, "SELECT COUNT(*) FROM ratings")[0][0]
    assert stored == len(typed) - n_down  # everything acknowledged before the crash is on disk

    with serve_process(db, port) as (proc, _):  # same port: the open page reconnects
        wait_saved()
        assert page.inner_text("#save-status") == "All ratings saved"
        n = page.locator(".sugg").count()
        for _ in range(n - n_down):
            sid = focused()
            typed[sid] = score_for(sid)
            page.keyboard.press(str(typed[sid]))
        wait_saved()
        page.keyboard.press("Enter")
        for qi in range(16, 20):
            rate_query(qi)
        page.keyboard.press("Enter")
        page.wait_for_selector("#done:not([hidden])")
        assert f"All {total} suggestions rated and saved" in page.inner_text("#done")
        assert page.inner_text("#progress-text").startswith(f"{total} / {total} rated")
    assert not errors, errors
    assert len(typed) == total

    # the database holds exactly what was typed (the changed rating overwritten, once per item)
    rows = q(db, "SELECT s.public_id, g.score, g.n_changes FROM ratings g JOIN suggestions s USING (sugg_id)")
    assert {sid: sc for sid, sc, _ in rows} == typed
    assert sorted(n for *_, n in rows).count(2) == 1 and len(rows) == total
    assert q(db, "SELECT COUNT(*) FROM events")[0][0] == total + 1

    # the browser never saw which model suggested what
    assert sum(b'"queries"' in b for b in bodies) >= 2  # the state JSON, at least on opening and after the reload
    for body in bodies:
        for spec in MODELS:
            assert f'"{spec}"'.encode() not in body
        assert b"use-m" not in body

    # analysis counts = the typed scores credited to each model (duplicates to both)
    res = analyze(db, bkr=False, n_boot=200)
    by_model = {}
    for spec, sid in q(db, "SELECT m.spec, s.public_id FROM credits c JOIN models m USING (model_id) JOIN suggestions s USING (sugg_id)"):
        by_model.setdefault(spec, []).append(typed[sid])
    for spec in MODELS:
        scores = by_model[spec]
        assert res["models"][spec]["ratings"] == len(scores) == 100
        assert res["models"][spec]["counts"] == {str(v): scores.count(v) for v in (1, 2, 3, 4)}
    assert res["complete"] and res["ratings"] == total and res["agreement"] is None
    page.close()


def test_rating_page_screenshot(browser, tmp_path, shared_data):
    """The page renders the query, its image and the scale; (a copy of) this screenshot is
    docs/img/study_page.png."""
    db = make_study(tmp_path / "shot.db", shared_data, queries=2)
    with serve_process(db) as (_, port):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/r/{token_of(db)}")
        page.wait_for_selector("body[data-ready='1']")
        for key in "2143":
            page.keyboard.press(key)
        page.wait_for_selector("body[data-pending='0']")
        page.wait_for_function("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
        assert page.locator(".query img").count() == 1 and page.locator(".sugg img").count() == page.locator(".sugg").count()
        out = tmp_path / "study_page.png"
        page.screenshot(path=str(out))
        assert out.stat().st_size > 20_000
        page.close()
