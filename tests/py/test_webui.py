"""test_webui.py — the chat page at / (src/server/webui/index.html) in a real headless browser
(Debian's chromium + chromium-driver, driven by selenium) against `snug serve` on the demo
model: the page loads and shows the memory plan from /health; a question gets its answer
streamed into the page (the answer text, the token count and tokens/s under it); thinking on
shows the reasoning in a collapsible block; the get_weather tool call is displayed; Stop
during a long answer aborts the fetch, the page says "stopped" and the server counts a
cancelled job (/metrics); with --api-key the page asks for the key and then answers; and
--no-webui answers / with 404. A screenshot goes to the build folder (webui.png).
Without chromium/chromedriver/selenium it prints SKIP (a failure with SNUG_REQUIRE_BROWSER=1).
Runnable as a script; prints "N passed, N failed".
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, SRC, Results  # noqa: E402

MODEL = os.path.join(SRC, "data", "demo", "snug-demo-q8_0.gguf")


def serve(args, tmp):
    port_file = os.path.join(tmp, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    p = subprocess.Popen([SNUG, "serve", "-m", MODEL, "--port", "0", "--port-file", port_file,
                          *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        if os.path.exists(port_file) and open(port_file).read().strip():
            break
        time.sleep(0.05)
    url = f"http://127.0.0.1:{open(port_file).read().strip()}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            break
        except Exception:
            time.sleep(0.05)
    return p, url


def stop(p):
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,800",
              "--disable-dev-shm-usage"):
        opts.add_argument(a)
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)


def wait(cond, timeout=30.0, step=0.02):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            v = cond()
            if v:
                return v
        except Exception:
            pass
        time.sleep(step)
    return None


def cancelled(url):
    m = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    for line in m.splitlines():
        if line.startswith("snug_requests_cancelled_total "):
            return float(line.split()[1])
    return -1.0


def ask(d, text, think=False, tools=False):
    from selenium.webdriver.common.by import By
    for box_id, want in (("think", think), ("tools", tools)):
        el = d.find_element(By.ID, box_id)
        if el.is_selected() != want:
            el.click()
    d.find_element(By.ID, "new").click()  # a fresh conversation: the demo model knows no history
    n_before = len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant"))
    d.find_element(By.ID, "input").send_keys(text)
    d.find_element(By.ID, "send").click()
    return wait(lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")) > n_before and
                d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1])


def main():
    res = Results()
    try:
        import selenium  # noqa: F401
        ok = shutil.which("chromedriver") and (shutil.which("chromium") or
                                               os.path.exists("/usr/bin/chromium"))
    except ImportError:
        ok = False
    if not ok:
        if os.environ.get("SNUG_REQUIRE_BROWSER") == "1":
            res.check(False, "chromium, chromium-driver and selenium are installed")
        else:
            print("SKIP: chromium / chromium-driver / selenium missing (scripts/deps.sh --python)")
        res.done()
    from selenium.webdriver.common.by import By
    shot = os.path.join(os.path.dirname(os.path.abspath(SNUG)), "webui.png")
    with tempfile.TemporaryDirectory() as tmp:
        p, url = serve([], tmp)
        d = browser()
        try:
            d.get(url + "/")
            plan = wait(lambda: "plan:" in d.find_element(By.ID, "plan").text and
                        d.find_element(By.ID, "plan").text)
            # the context is the server's choice (sized by itself without --ctx): any number
            res.check(plan and re.search(r"context [0-9]+ tokens", plan) and "MTP" in plan,
                      f"the page shows the memory plan from /health: {plan}")
            res.check(d.find_element(By.ID, "status").text == "ready", "status: ready")

            # a streamed answer
            box = ask(d, "What is the capital of France?")
            stats = wait(lambda: box.find_element(By.CLASS_NAME, "stats").text)
            content = box.find_element(By.CLASS_NAME, "content").text
            res.check("Paris" in content, f"the streamed answer appears: {content!r}")
            res.check(stats and "tok/s" in stats and "context" in stats,
                      f"tokens/s and context used under the answer: {stats!r}")

            # thinking: a collapsible reasoning block
            box = ask(d, "What is 3+5?", think=True)
            wait(lambda: box.find_element(By.CLASS_NAME, "stats").text)
            det = box.find_elements(By.CSS_SELECTOR, "details.reasoning")
            res.check(det and len(det[0].get_attribute("textContent")) > 30 and
                      det[0].get_attribute("open") is None,
                      "reasoning is shown in a closed <details> block")
            res.check(box.find_element(By.CLASS_NAME, "content").text.strip(),
                      f"the answer after the reasoning: "
                      f"{box.find_element(By.CLASS_NAME, 'content').text!r}")

            # a tool call is displayed
            box = ask(d, "What is the weather like in Paris right now?", tools=True)
            wait(lambda: box.find_element(By.CLASS_NAME, "stats").text)
            tools = [t.text for t in box.find_elements(By.CLASS_NAME, "tool")]
            res.check(any("get_weather" in t and "Paris" in t for t in tools),
                      f"the tool call is displayed: {tools}")

            d.save_screenshot(shot)
            res.check(os.path.getsize(shot) > 10000, f"screenshot saved: {shot}")

            # stop: a long answer, Stop as soon as text streams in
            c0 = cancelled(url)
            box = ask(d, "Count from 1 to 100, one number per line.", tools=False)
            wait(lambda: len(box.find_element(By.CLASS_NAME, "content").text) > 0, step=0.005)
            d.find_element(By.ID, "stop").click()
            stats = wait(lambda: box.find_element(By.CLASS_NAME, "stats").text)
            content = box.find_element(By.CLASS_NAME, "content").text
            res.check(stats and "stopped" in stats, f"the page says stopped: {stats!r}")
            res.check(not content.rstrip().endswith("100"),
                      f"the answer was cut short ({len(content.split())} numbers)")
            res.check(wait(lambda: cancelled(url) > c0, timeout=10),
                      "the server cancelled the job (snug_requests_cancelled_total)")
        finally:
            d.quit()
            stop(p)

        # API key: the page asks, then answers
        p, url = serve(["--api-key", "sekrit"], tmp)
        d = browser()
        try:
            d.get(url + "/")
            wait(lambda: d.find_element(By.ID, "status").text == "ready")
            d.find_element(By.ID, "input").send_keys("What is the capital of Italy?")
            d.find_element(By.ID, "send").click()
            alert = wait(lambda: d.switch_to.alert)
            res.check(alert is not None and "API key" in alert.text,
                      "a 401 makes the page ask for the API key")
            if alert:
                alert.send_keys("sekrit")
                alert.accept()
            box = wait(lambda: d.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")[-1].text
                       and d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1])
            res.check(box and "Rome" in box.find_element(By.CLASS_NAME, "content").text,
                      "with the key the question is answered")
        finally:
            d.quit()
            stop(p)

        p, url = serve(["--no-webui"], tmp)
        try:
            urllib.request.urlopen(url + "/", timeout=5)
            code = 200
        except urllib.error.HTTPError as e:
            code = e.code
        res.check(code == 404, f"--no-webui: / answers {code}")
        stop(p)
    res.done()


if __name__ == "__main__":
    main()
