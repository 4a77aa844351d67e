"""The dashboard at `/`, driven in a real headless browser.

Usage: check_dashboard.py BASE_URL API_KEY SCREENSHOT_PATH

BASE_URL is a running `homeagent serve` (with API_KEY as its key and the
offline demo model, which follows the mock LLM's script). The check drives
Debian's chromium through Debian's chromedriver with selenium, as a person
would: it loads the page, gives the key when the page asks for it, sends
`!slowbatch4` in the chat box and waits for the timeline to draw one batch
of 4 demo_sleep calls *side by side* (they ran in parallel), then sends
`!serialbatch2` and waits for its 3 calls drawn *one under another* (the
batch holds a serial tool, so it ran serially). "Side by side" and "one
under another" are judged from the bars' rectangles as laid out by the
browser, not from class names, so a stylesheet that draws a parallel batch
stacked fails the check. The replies must state executed=4 and executed=2
(counted by the model's script from the tool results). Finally it loads the
page through a proxy, starts a long call and cuts the connection: the reply
must say the connection was lost, and no call may stay drawn as running.
Then, through another proxy: the key given three times while the server
is away opens one event stream once it is back; a 401 while a reply
streams asks for the key again, and given, the stream resumes where it
stopped (a batch run meanwhile is drawn) and the streaming reply is kept.
Last, seven tabs on one server (one more than the connections a browser
opens to it) share one event stream: one tab reads it, the seventh loads
and chats, and a tab that neither reads it nor ran the batch draws the
batch, also after the reading tab closes and another takes over. Saves a
screenshot.

The browser and the driver are the system's: /usr/bin/chromium and
/usr/bin/chromedriver are named explicitly, so selenium never runs
selenium-manager (which would try to download a browser of its own).
"""

import json
import os
import socket
import sys
import tempfile
import threading
import time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = os.environ.get("HOMEAGENT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("HOMEAGENT_CHROMEDRIVER", "/usr/bin/chromedriver")
# Generous: the machine is shared and slow; a pass never waits this long.
WAIT_S = 120
# Sub-pixel rounding between two rectangles that touch.
EPSILON_PX = 0.5

FAILING_CALLS = '!calls [{"name": "no_such_tool", "arguments": {}}, {"name": "demo_echo", "arguments": {"tag": "x"}}]'
MESSAGES = ["!slowbatch4", "!serialbatch2", FAILING_CALLS, "!cut"]
SLOW_CALL = '!calls [{"name": "demo_sleep", "arguments": {"ms": 20000}}]'
# Long enough to log in again while it runs, short enough to wait for.
SLOWISH_CALL = '!calls [{"name": "demo_sleep", "arguments": {"ms": 8000}}]'
# Tabs opened at once on one server: one more than the six connections a
# browser opens to one HTTP/1.1 server.
TABS = 7

# Each bar of a batch: its tool, status, painted background and whether its
# tooltip carries an error; run in the page.
COLOURS_JS = """
return Array.from(arguments[0].querySelectorAll('.call')).map((el) => ({
  tool: el.textContent.split(' ')[0], status: el.dataset.status,
  background: getComputedStyle(el).backgroundColor, error: el.title.includes('not_found'),
}));
"""

# Each bar of a batch: its rectangle, status and text; run in the page.
BARS_JS = """
const batch = arguments[0];
return Array.from(batch.querySelectorAll('.call')).map((el) => {
  const r = el.getBoundingClientRect();
  return { status: el.dataset.status, text: el.textContent,
           left: r.left, right: r.right, top: r.top, bottom: r.bottom,
           width: r.width, height: r.height };
});
"""


def make_driver(profile_dir):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        # CI runs as root in a container, where Chromium's sandbox cannot start.
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,900",
        "--no-first-run",
        "--no-default-browser-check",
        f"--user-data-dir={profile_dir}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def visible(driver, element_id):
    elements = driver.find_elements(By.ID, element_id)
    return bool(elements) and elements[0].is_displayed()


def wait_for(driver, what, predicate):
    """Polls `predicate(driver)` until it returns something truthy; raises
    TimeoutException naming `what` after WAIT_S."""
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.2).until(
        lambda d: predicate(d), message=f"waited {WAIT_S} s for {what}"
    )


def send(driver, text):
    box = driver.find_element(By.ID, "chat-input")
    box.clear()
    box.send_keys(text, Keys.ENTER)


def finished_batch(parallel, size):
    """A predicate: the newest timeline batch drawn with data-parallel =
    `parallel` whose `size` calls all ended ok."""

    def find(driver):
        selector = f'#timeline .batch[data-parallel="{str(parallel).lower()}"]'
        for batch in driver.find_elements(By.CSS_SELECTOR, selector):
            calls = batch.find_elements(By.CSS_SELECTOR, ".call")
            ok = batch.find_elements(By.CSS_SELECTOR, '.call[data-status="ok"]')
            if len(calls) == size and len(ok) == size:
                return batch
        return None

    return find


def failed_batch(driver):
    """The batch holding a finished call of no_such_tool, once both of its
    calls have ended."""
    for batch in driver.find_elements(By.CSS_SELECTOR, "#timeline .batch"):
        calls = batch.find_elements(By.CSS_SELECTOR, ".call")
        ended = [c for c in calls if c.get_attribute("data-status") not in (None, "running")]
        if len(calls) == 2 and len(ended) == 2 and "no_such_tool" in batch.text:
            return batch
    return None


class DroppingProxy:
    """A TCP proxy on a free loopback port in front of `base` whose
    `drop_all` cuts every connection it carries, as a lost network or a
    restarted server would (Chromium's offline emulation leaves a stream
    already being read alone).

    `refusing` makes it answer every *new* connection itself instead:
    `"401"` with a 401 (as a server whose key changed would), `"closed"` by
    closing it (as a server that is down would). `drop_where(test)` cuts
    only the connections whose latest request line passes `test`, and
    `requests` counts request lines seen, so a check can tell which
    requests a page made and keep one stream while it cuts the others."""

    def __init__(self, base):
        host, port = base.split("//", 1)[1].split(":")
        self.upstream = (host, int(port.rstrip("/")))
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.refusing = None
        self.connections = []  # [client, server, latest request line]
        self.requests = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            refusing = self.refusing
            if refusing == "closed":
                client.close()
                continue
            if refusing == "401":
                threading.Thread(target=self.refuse, args=(client,), daemon=True).start()
                continue
            server = socket.create_connection(self.upstream)
            connection = [client, server, ""]
            with self.lock:
                self.connections.append(connection)
            threading.Thread(target=self.pump, args=(client, server, connection), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client, None), daemon=True).start()

    @staticmethod
    def refuse(client):
        try:
            client.recv(65536)
            client.sendall(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        except OSError:
            pass
        client.close()

    def pump(self, source, sink, connection):
        try:
            while data := source.recv(65536):
                if connection is not None:
                    # A fetch sends its request head in one segment.
                    line = data.split(b"\r\n", 1)[0].decode("latin-1")
                    if line.endswith(" HTTP/1.1"):
                        with self.lock:
                            connection[2] = line
                            self.requests.append(line)
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def drop_where(self, test):
        with self.lock:
            dropped = [c for c in self.connections if test(c[2])]
            self.connections = [c for c in self.connections if not test(c[2])]
        for client, server, _ in dropped:
            for s in (client, server):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def drop_all(self):
        self.drop_where(lambda _line: True)

    def count(self, needle):
        with self.lock:
            return sum(needle in line for line in self.requests)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.listener.close()
        self.drop_all()


def error_containing(needle):
    def find(driver):
        for msg in driver.find_elements(By.CSS_SELECTOR, "#conversation .msg.error"):
            if needle in msg.text:
                return msg.text
        return None

    return find


def user_messages(driver):
    return [m.text for m in driver.find_elements(By.CSS_SELECTOR, "#conversation .msg.user")]


def reply_containing(needle):
    def find(driver):
        for msg in driver.find_elements(By.CSS_SELECTOR, "#conversation .msg.assistant"):
            if needle in msg.text:
                return msg.text
        return None

    return find


def eventually(driver, predicate, seconds):
    """`predicate(driver)` once it is truthy, or None after `seconds`: for
    a check that must be able to fail without ending the run."""
    try:
        return WebDriverWait(driver, seconds, poll_frequency=0.2).until(lambda d: predicate(d))
    except TimeoutException:
        return None


def status(base, key):
    request = urllib.request.Request(base + "/api/v1/status", headers={"authorization": "Bearer " + key})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def run_turn(base, key, session, text):
    """Runs `text` on `session` straight against the server, as another
    client would, and returns the frames of its answer."""
    request = urllib.request.Request(
        f"{base}/api/v1/sessions/{session}/messages",
        data=json.dumps({"text": text}).encode(),
        headers={"authorization": "Bearer " + key, "content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=WAIT_S) as response:
        body = response.read().decode()
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]


def batch_drawn(batch_id):
    def find(driver):
        return driver.find_elements(By.CSS_SELECTOR, f'#timeline .batch[data-batch="{batch_id}"] .call')

    return find


def side_by_side(bars):
    """One horizontal row: every pair shares a vertical band, and sorted by
    their left edge no bar overlaps the next."""
    if not all(b["width"] > 0 and b["height"] > 0 for b in bars):
        return False
    band_top = max(b["top"] for b in bars)
    band_bottom = min(b["bottom"] for b in bars)
    row = sorted(bars, key=lambda b: b["left"])
    apart = all(a["right"] <= b["left"] + EPSILON_PX for a, b in zip(row, row[1:]))
    distinct = len({round(b["left"]) for b in bars}) == len(bars)
    return band_top < band_bottom and apart and distinct


def stacked(bars):
    """One column: sorted by their top edge no bar overlaps the next, and
    every pair shares a horizontal band."""
    if not all(b["width"] > 0 and b["height"] > 0 for b in bars):
        return False
    band_left = max(b["left"] for b in bars)
    band_right = min(b["right"] for b in bars)
    column = sorted(bars, key=lambda b: b["top"])
    apart = all(a["bottom"] <= b["top"] + EPSILON_PX for a, b in zip(column, column[1:]))
    distinct = len({round(b["top"]) for b in bars}) == len(bars)
    return band_left < band_right and apart and distinct


def main() -> int:
    base, key, screenshot = sys.argv[1], sys.argv[2], sys.argv[3]
    passed, failures = 0, []

    def check(name, ok, detail=""):
        nonlocal passed
        print(("ok   " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""), flush=True)
        if ok:
            passed += 1
        else:
            failures.append(name)
        return ok

    with tempfile.TemporaryDirectory(prefix="homeagent-dashboard-profile-") as profile:
        driver = make_driver(profile)
        try:
            run(driver, base, key, screenshot, check)
        except (TimeoutException, WebDriverException) as error:
            check("the page reached every step", False, str(error).strip())
            try:
                driver.save_screenshot(screenshot)
                print(f"dashboard-check: the page at the failure is in {screenshot}")
            except WebDriverException:
                pass
        finally:
            # Uncaught exceptions of the page's own script fail the check;
            # refused requests (the 401 that makes it ask for the key) do not.
            errors = [
                entry["message"]
                for entry in driver.get_log("browser")
                if entry["level"] == "SEVERE" and "Failed to load resource" not in entry["message"]
            ]
            check("the page's script logged no errors", not errors, json.dumps(errors, indent=1))
            driver.quit()

    print(f"dashboard-check: {passed} passed, {len(failures)} failed")
    return 1 if failures else 0


def run(driver, base, key, screenshot, check):
    driver.get(base + "/")
    wait_for(driver, "the page to ask for the key", lambda d: visible(d, "login") and visible(d, "token"))
    check("without a key the page asks for it", not visible(driver, "app"))
    check("asking for the key first is not reported as a refused key", not visible(driver, "login-error"),
          driver.find_element(By.ID, "login-error").text)

    token = driver.find_element(By.ID, "token")
    token.send_keys("not-" + key, Keys.ENTER)
    wait_for(driver, "the page to say a wrong key was refused", lambda d: visible(d, "login-error"))
    check("a wrong key is refused and asked for again",
          "refused" in driver.find_element(By.ID, "login-error").text and not visible(driver, "app"),
          driver.find_element(By.ID, "login-error").text)

    token.clear()
    token.send_keys(key, Keys.ENTER)
    wait_for(driver, "the app after the key was given", lambda d: visible(d, "app"))
    check("with the key the page shows the chat and the timeline", not visible(driver, "login"))
    check("the key is kept in session storage",
          driver.execute_script("return sessionStorage.getItem('homeagent_token')") == key)
    # The batch's events must not start before the live stream is connected.
    wait_for(driver, "the event stream to connect", lambda d: d.find_element(By.ID, "conn").text == "live")
    # The stream is read with fetch and the Authorization header: the key
    # is in no URL the page loaded and in no cookie.
    urls = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name).concat([location.href])")
    leaked = [u for u in urls if key in u or "token=" in u]
    # Every cookie the browser holds, whatever its path (document.cookie
    # shows only those for the page's own path).
    cookies = json.dumps(driver.execute_cdp_cmd("Network.getAllCookies", {}))
    check("the key is in no URL the page loaded and in no cookie",
          not leaked and key not in cookies and "homeagent_token" not in cookies,
          json.dumps({"urls": urls, "cookies": cookies}, indent=1))
    wait_for(driver, "the sources list", lambda d: d.find_elements(By.CSS_SELECTOR, '#sources li[data-source="demo"]'))
    # The script started a waiter bound as `kitchen`; the status refresh
    # (every 5 s) shows it.
    device = wait_for(driver, "the kitchen device in the Devices panel",
                      lambda d: d.find_elements(By.CSS_SELECTOR, '#devices li[data-device="kitchen"]'))[0]
    check("the Devices panel lists the bound waiter with its capabilities",
          device.text.startswith("kitchen (") and "cmd" in device.text and "connected" in device.text,
          device.text)
    check("the sources list shows the demo source as healthy",
          driver.find_element(By.CSS_SELECTOR, '#sources li[data-source="demo"]').get_attribute("data-healthy") == "true")

    # A parallel batch: 4 bars side by side.
    start = time.monotonic()
    send(driver, "!slowbatch4")
    batch = wait_for(driver, "a parallel batch of 4 finished calls", finished_batch(True, 4))
    reply = wait_for(driver, "the reply stating executed=4", reply_containing("executed=4"))
    print(f"     (!slowbatch4 drawn and answered after {time.monotonic() - start:.1f} s)")
    check("the !slowbatch4 reply states executed=4", "executed=4" in reply, reply)
    bars = driver.execute_script(BARS_JS, batch)
    check("the 4 parallel calls are drawn side by side", side_by_side(bars), json.dumps(bars, indent=1))
    check("each parallel bar shows its tool and duration",
          all(b["text"].startswith("demo_sleep ok ") and b["text"].endswith(" ms") for b in bars),
          json.dumps([b["text"] for b in bars]))
    label = batch.find_element(By.CSS_SELECTOR, ".label").text
    check("the parallel batch is labelled as such", label == "4 call(s), in parallel", label)

    # A serial batch: 3 bars (2 demo_sleep + 1 demo_note) one under another.
    send(driver, "!serialbatch2")
    batch = wait_for(driver, "a serial batch of 3 finished calls", finished_batch(False, 3))
    reply = wait_for(driver, "the reply stating executed=2", reply_containing("executed=2"))
    check("the !serialbatch2 reply states executed=2", "executed=2" in reply, reply)
    bars = driver.execute_script(BARS_JS, batch)
    check("the 3 serial calls are drawn one under another", stacked(bars), json.dumps(bars, indent=1))
    label = batch.find_element(By.CSS_SELECTOR, ".label").text
    check("the serial batch is labelled as such", label == "3 call(s), one after another", label)

    # Status colours: a call of a tool that does not exist fails (red, its
    # error in the tooltip) next to one that succeeds (green).
    send(driver, FAILING_CALLS)
    batch = wait_for(driver, "a batch with a failed call", failed_batch)
    wait_for(driver, "the reply to the failing calls", reply_containing("1 failed"))
    colours = driver.execute_script(COLOURS_JS, batch)
    check("a failed call is drawn red and an ok call green",
          colours == [
              {"tool": "no_such_tool", "status": "error", "background": "rgb(201, 55, 59)", "error": True},
              {"tool": "demo_echo", "status": "ok", "background": "rgb(46, 157, 79)", "error": False},
          ],
          json.dumps(colours))
    # An answer the output token limit cut off says so below its text.
    send(driver, "!cut")
    reply = wait_for(driver, "the note under a cut-off answer", reply_containing("[the answer was cut off"))
    check("a cut-off answer shows its text and the note naming agent.max_tokens",
          "in the middle of a" in reply and "agent.max_tokens" in reply, reply)
    check("the user's messages are in the conversation", user_messages(driver) == MESSAGES,
          json.dumps(user_messages(driver)))
    # The counters refresh after each reply: four inputs ran.
    wait_for(driver, "the counters", lambda d: d.find_element(By.ID, "counters").text.startswith("inputs run 4 "))
    check("the screenshot was saved", driver.save_screenshot(screenshot) and os.path.getsize(screenshot) > 0)

    # The key is asked for once per tab, and the tab's session comes back
    # with its conversation and its batches after a reload.
    driver.refresh()
    wait_for(driver, "the app after a reload", lambda d: visible(d, "app"))
    check("after a reload the page does not ask for the key again", not visible(driver, "login"))
    wait_for(driver, "the conversation after a reload", reply_containing("executed=4"))
    check("after a reload the conversation is shown again", user_messages(driver) == MESSAGES,
          json.dumps(user_messages(driver)))
    batch = wait_for(driver, "the parallel batch after a reload", finished_batch(True, 4))
    bars = driver.execute_script(BARS_JS, batch)
    check("after a reload the parallel batch is drawn side by side again", side_by_side(bars),
          json.dumps(bars, indent=1))
    wait_for(driver, "the event stream after a reload", lambda d: d.find_element(By.ID, "conn").text == "live")

    # The connection drops while a turn runs (the network goes, or the
    # server restarts): the reply says so, instead of staying blank with
    # its call drawn as running for ever. The page is loaded through a
    # proxy that then cuts every connection it carries.
    with DroppingProxy(base) as proxy:
        driver.get(proxy.url + "/")
        wait_for(driver, "the page through the proxy to ask for the key", lambda d: visible(d, "token"))
        driver.find_element(By.ID, "token").send_keys(key, Keys.ENTER)
        wait_for(driver, "the app through the proxy", lambda d: visible(d, "app"))
        send(driver, SLOW_CALL)
        wait_for(driver, "the slow call to be drawn running",
                 lambda d: d.find_elements(By.CSS_SELECTOR, '#timeline .call[data-status="running"]'))
        proxy.drop_all()
        lost = wait_for(driver, "the reply to say the connection was lost", error_containing("connection was lost"))
        check("a turn whose connection dropped says so", "may not have finished" in lost, lost)
        # Reloaded, the conversation says that input got no reply (the
        # dropped connection stopped its turn), instead of showing the
        # question alone.
        driver.refresh()
        wait_for(driver, "the app after the reload through the proxy", lambda d: visible(d, "app"))
        stopped = wait_for(driver, "the history to mark the input without a reply",
                           error_containing("no reply was stored"))
        check("after a reload an input without a stored reply says so", "stopped" in stopped, stopped)
    statuses = [c.get_attribute("data-status") for c in driver.find_elements(By.CSS_SELECTOR, "#timeline .call")]
    check("no call is left drawn as running after the connection dropped", "running" not in statuses,
          json.dumps(statuses))

    check_reconnects(driver, base, key, check)
    check_tabs_share_one_stream(driver, base, key, check)


def check_reconnects(driver, base, key, check):
    """Giving the key while the server is unreachable, then again after a
    401 while a turn streams: one event stream, resumed where it stopped,
    and the streaming reply kept."""
    with DroppingProxy(base) as proxy:
        driver.get(proxy.url + "/")
        token = wait_for(driver, "the page through a new proxy to ask for the key",
                         lambda d: visible(d, "token") and d.find_element(By.ID, "token"))
        # The server goes away after the page loaded; the key is given
        # three times while it is away.
        proxy.refusing = "closed"
        proxy.drop_all()
        token.send_keys(key, Keys.ENTER)
        wait_for(driver, "the page to say the server cannot be reached",
                 lambda d: "cannot be reached" in d.find_element(By.ID, "login-error").text)
        for _ in range(2):
            time.sleep(0.3)
            token.send_keys(Keys.ENTER)
        time.sleep(0.5)
        proxy.refusing = None
        wait_for(driver, "the app once the server is back", lambda d: visible(d, "app"))
        wait_for(driver, "the event stream once the server is back",
                 lambda d: d.find_element(By.ID, "conn").text == "live")
        # Two retry periods: a second attempt still pending would connect again.
        time.sleep(5)
        streams = proxy.count("GET /api/v1/events ")
        check("a key given three times while the server was away opens one event stream", streams == 1,
              f"{streams} event streams were opened")

        # The key is refused while a turn streams (the server's key changed):
        # the page asks for it again; meanwhile another client runs a batch.
        send(driver, SLOWISH_CALL)
        wait_for(driver, "the slowish call to be drawn running",
                 lambda d: d.find_elements(By.CSS_SELECTOR, '#timeline .call[data-status="running"]'))
        proxy.refusing = "401"
        proxy.drop_where(lambda line: "/messages " not in line)
        wait_for(driver, "the page to ask for the key again after a 401",
                 lambda d: visible(d, "login") and "refused" in d.find_element(By.ID, "login-error").text)
        frames = run_turn(base, key, "dashboard-check-other",
                          '!calls [{"name": "demo_echo", "arguments": {"tag": "while-away"}}]')
        batch_ids = {f["batch_id"] for f in frames if f.get("type") == "tool_call"}
        proxy.refusing = None
        token = driver.find_element(By.ID, "token")
        token.clear()
        token.send_keys(key, Keys.ENTER)
        wait_for(driver, "the app after the key was given again", lambda d: visible(d, "app"))
        missed = len(batch_ids) == 1 and eventually(driver, batch_drawn(next(iter(batch_ids))), 20)
        check("after logging in again the stream resumes and draws a batch run while logged out",
              bool(missed), f"batches {batch_ids} not drawn")
        reply = eventually(driver, reply_containing("tool results"), 60)
        check("logging in again keeps the reply that was streaming", reply is not None,
              json.dumps([m.text for m in driver.find_elements(By.CSS_SELECTOR, "#conversation .msg")]))
        check("logging in again does not redraw the conversation", user_messages(driver) == [SLOWISH_CALL],
              json.dumps(user_messages(driver)))


def check_tabs_share_one_stream(driver, base, key, check):
    """More dashboard tabs than a browser opens connections to one server:
    they share one event stream, so the last tab still loads and chats,
    every tab draws every batch, and closing the tab that reads the stream
    hands it to another."""
    driver.get(base + "/")
    wait_for(driver, "the app on the server again", lambda d: visible(d, "app"))

    def subscribers_become(n):
        return eventually(driver, lambda _d: status(base, key)["events"]["subscribers"] == n, 20)

    for tab in range(1, TABS):
        driver.switch_to.new_window("tab")
        driver.get(base + "/")
        token = wait_for(driver, f"tab {tab + 1} to ask for the key",
                         lambda d: visible(d, "token") and d.find_element(By.ID, "token"))
        token.send_keys(key, Keys.ENTER)
        wait_for(driver, f"tab {tab + 1}'s app", lambda d: visible(d, "app"))
        wait_for(driver, f"tab {tab + 1}'s event stream", lambda d: d.find_element(By.ID, "conn").text == "live")
        if tab == 2 and not check("three tabs share one event stream", subscribers_become(1),
                                  f"{status(base, key)['events']['subscribers']} streams are open"):
            return
    tabs = driver.window_handles

    def readers(handles):
        """The tabs among `handles` that read the stream themselves."""
        found = []
        for handle in handles:
            driver.switch_to.window(handle)
            if driver.execute_script("return Boolean(events && events.reading)"):
                found.append(handle)
        return found

    def run_in(tab, tag):
        driver.switch_to.window(tab)
        replies = len(driver.find_elements(By.CSS_SELECTOR, "#conversation .msg.assistant"))
        send(driver, f'!calls [{{"name": "demo_echo", "arguments": {{"tag": "{tag}"}}}}]')
        wait_for(driver, f"the reply to {tag}", lambda d: any(
            "tool results" in m.text for m in d.find_elements(By.CSS_SELECTOR, "#conversation .msg.assistant")[replies:]))
        return driver.find_element(By.CSS_SELECTOR, "#timeline .batch").get_attribute("data-batch")

    def drawn_elsewhere(reader, runner, batch):
        """Whether a tab that neither reads the stream nor ran the batch
        draws it: only what the reader passes on can get it there."""
        watcher = next(t for t in tabs if t not in (reader, runner) and t in driver.window_handles)
        driver.switch_to.window(watcher)
        return bool(eventually(driver, batch_drawn(batch), 20))

    reader = readers(tabs)
    if not check("exactly one tab reads the stream", len(reader) == 1, f"{len(reader)} tabs read it"):
        return
    reader = reader[0]
    runner = next(t for t in reversed(tabs) if t != reader)
    batch = run_in(runner, "from-one-tab")
    check("a batch run in one tab is drawn in a tab that does not read the stream",
          drawn_elsewhere(reader, runner, batch), batch)
    # The tab reading the stream closes: another takes it over.
    driver.switch_to.window(reader)
    driver.close()
    rest = [t for t in tabs if t != reader]
    deadline = time.monotonic() + 20
    while len(taken := readers(rest)) != 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    if not check("closing the tab that read the stream hands it to another", len(taken) == 1,
                 f"{len(taken)} tabs read it"):
        return
    batch = run_in(runner, "after-close")
    check("after the handover a batch is still drawn in a tab that does not read the stream",
          drawn_elsewhere(taken[0], runner, batch), batch)
    check("after the handover the tabs still share one stream", subscribers_become(1),
          f"{status(base, key)['events']['subscribers']} streams are open")
    for handle in rest[1:]:
        driver.switch_to.window(handle)
        driver.close()
    driver.switch_to.window(rest[0])

if __name__ == "__main__":
    sys.exit(main())
