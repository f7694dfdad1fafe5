"""Pages the hand-off tests hand to a person, served on loopback by a small threaded HTTP server.

Each page records what it received (`window.__log`) so a test can assert the page saw the gesture or the text
itself, not merely that a request was answered.
"""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.loopback import HTML, reply

_LOG = "<script>window.__log = [];</script>"

# A widget in the shape the common CAPTCHA services embed: a checkbox in a container; clicking it opens a puzzle
# in a separate, absolutely positioned overlay; finishing the puzzle navigates away.
WIDGET = f"""<!doctype html><html><head><title>Checkout</title>{_LOG}
<style>
 body {{ font-family: sans-serif; margin: 0; padding: 20px; }}
 .h-captcha {{ width: 300px; height: 74px; border: 1px solid #999; margin-top: 380px; margin-left: 40px;
   display: flex; align-items: center; gap: 12px; padding: 0 12px; background: #f9f9f9; }}
 .captcha-overlay {{ position: absolute; left: 420px; top: 120px; width: 320px; height: 340px;
   background: white; border: 2px solid #333; display: none; }}
 .captcha-overlay.open {{ display: block; }}
</style></head><body>
<h1>Almost there</h1><p>Confirm you are a person to see your order.</p>
<div class="h-captcha" data-sitekey="test-site-key" id="captcha">
  <button id="tick" style="width:28px;height:28px" onclick="open_puzzle()"></button><span>I am human</span>
</div>
<div class="captcha-overlay" id="puzzle" data-challenge-overlay>
  <p style="margin:16px">Select every square with a bus.</p>
  <button id="verify" style="margin:16px;width:120px;height:40px" onclick="location.href='/order'">Verify</button>
</div>
<script>
function open_puzzle() {{ window.__log.push('opened'); document.getElementById('puzzle').classList.add('open'); }}
</script></body></html>"""

ORDER = """<!doctype html><html><head><title>Your order</title></head><body>
<h1>Order 1042</h1><p>Shipped on Monday; it arrives on Thursday.</p></body></html>"""

# A slider check: drag the knob to the end. Every pointer event the page receives is recorded.
SLIDER = f"""<!doctype html><html><head><title>Slide to verify</title>{_LOG}
<style> body {{ margin: 0; font-family: sans-serif; }}
 #track {{ position: absolute; left: 100px; top: 200px; width: 400px; height: 40px; background: #ddd; }}
 #knob {{ position: absolute; left: 0; top: 0; width: 40px; height: 40px; background: #36c; touch-action: none; }}
</style></head><body>
<div id="track"><div id="knob"></div></div><p id="status" style="margin-top:300px">Slide to the end</p>
<script>
const knob = document.getElementById('knob'); let dragging = false;
knob.addEventListener('pointerdown', e => {{ dragging = true; knob.setPointerCapture(e.pointerId);
  window.__log.push(['down', e.clientX, e.clientY, e.buttons]); }});
knob.addEventListener('pointermove', e => {{ if (!dragging) return;
  window.__log.push(['move', e.clientX, e.clientY, e.buttons]);
  knob.style.left = Math.max(0, Math.min(360, e.clientX - 100 - 20)) + 'px'; }});
knob.addEventListener('pointerup', e => {{ dragging = false; window.__log.push(['up', e.clientX, e.clientY, e.buttons]);
  if (parseInt(knob.style.left) >= 350) document.getElementById('status').textContent = 'Verified'; }});
</script></body></html>"""

# A two-step login: the email form is replaced by the password form, then the account page.
LOGIN = f"""<!doctype html><html><head><title>Sign in</title>{_LOG}</head><body style="font-family:sans-serif">
<h1>Sign in to Example Bank</h1>
<form id="login" onsubmit="event.preventDefault(); next_step();" style="margin-top:40px">
  <label>Email <input id="email" name="email" autocomplete="off"></label>
  <button id="next" type="submit">Next</button>
</form>
<script>
function next_step() {{
  window.__log.push(['email', document.getElementById('email').value]);
  document.getElementById('login').remove();
  const f = document.createElement('form'); f.id = 'password-form';
  f.innerHTML = '<label>Password <input id="password" type="password"></label> <button type="submit">Sign in</button>';
  f.onsubmit = (e) => {{ e.preventDefault(); location.href = '/account'; }};
  document.body.appendChild(f);
}}
</script></body></html>"""

ACCOUNT = (
    """<!doctype html><html><head><title>Account</title></head><body><h1>Balance</h1><p>1,204.50</p></body></html>"""
)

CONSENT = f"""<!doctype html><html><head><title>News</title>{_LOG}</head><body style="font-family:sans-serif">
<h1>Today's news</h1><p>Some article text behind a consent dialog.</p>
<div role="dialog" aria-label="Cookie consent" id="consent"
     style="position:fixed; left:200px; top:150px; width:400px; height:200px; background:#fff; border:2px solid #000">
  <p>We use cookies.</p><button id="accept" onclick="window.__log.push('accepted'); this.parentNode.remove()">Accept</button>
</div></body></html>"""

# A text field that records every value it takes and every key it hears.
TYPING = f"""<!doctype html><html><head><title>Address</title>{_LOG}</head><body style="font-family:sans-serif">
<label>Street <input id="street" style="width:400px" autocomplete="off"></label>
<label>City <input id="city" autocomplete="off"></label>
<div id="pane" style="margin-top:30px;width:300px;height:120px;overflow:auto;border:1px solid #000">
  <div style="height:1000px">a long list</div></div>
<script>
const s = document.getElementById('street');
s.addEventListener('input', () => window.__log.push(['input', s.value]));
document.addEventListener('keydown', e => window.__log.push(['key', e.key, e.ctrlKey]));
</script></body></html>"""

BLANK = "<!doctype html><html><head><title></title></head><body></body></html>"

# Keeps painting, so the screencast has a new frame to send as often as Chromium will paint one.
ANIMATED = """<!doctype html><html><head><title>Clock</title></head><body style="margin:0">
<div id="box" style="position:absolute;width:80px;height:80px;background:#c33"></div><p id="n"></p>
<script>let n = 0; (function tick() { n++; const b = document.getElementById('box');
b.style.left = (100 + 300 * Math.abs(Math.sin(n / 30))) + 'px'; b.style.top = '100px';
document.getElementById('n').textContent = n; requestAnimationFrame(tick); })();</script></body></html>"""

PAGES = {
    "/widget": WIDGET,
    "/order": ORDER,
    "/slider": SLIDER,
    "/login": LOGIN,
    "/account": ACCOUNT,
    "/consent": CONSENT,
    "/typing": TYPING,
    "/blank": BLANK,
    "/animated": ANIMATED,
}


class _Handler(BaseHTTPRequestHandler):
    server: _PageServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/slow":  # starts a page and holds the rest back: the document stays "loading"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(b"<!doctype html><html><head><title>Slow</title></head><body><p>Loading your")
            self.wfile.flush()
            self.server.release.wait(90)
            with contextlib.suppress(OSError):
                self.wfile.write(b" page</p></body></html>")
            return
        body = PAGES.get(path)
        if body is None:
            self.send_error(404)
            return
        reply(self, 200, body.encode(), HTML)


class _PageServer(ThreadingHTTPServer):
    daemon_threads = True
    release: threading.Event


class PageServer:
    """The test pages on 127.0.0.1 (an ephemeral port)."""

    def __init__(self) -> None:
        self.server = _PageServer(("127.0.0.1", 0), _Handler)
        self.server.release = threading.Event()
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> PageServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.release.set()
        self.server.shutdown()
        self.server.server_close()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"
