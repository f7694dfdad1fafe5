// The playground's service worker. It shows the notification that the deployment's /push/hook sends when a
// turn stops (the payload: {title, body, tag, url, session_id, reason, needs_input}), tells any open
// playground page about it, and opens the conversation when the notification is clicked.
// Served at /sw.js, so its scope is the page's own folder.

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

function read(data) {
  if (!data) return {};
  try {
    const note = data.json();
    return note && typeof note === "object" ? note : { body: String(note) };
  } catch {
    return { body: data.text() };
  }
}

async function pages() {
  return self.clients.matchAll({ type: "window", includeUncontrolled: true });
}

async function show(data) {
  const note = read(data);
  const title = String(note.title || "oberik");
  const url = new URL(note.url || "./", self.registration.scope).href;
  const options = {
    body: String(note.body || ""),
    tag: String(note.tag || "oberik"),
    renotify: true,
    // A turn waiting on the person stays on screen until they act on it.
    requireInteraction: Boolean(note.needs_input),
    data: { url, session_id: note.session_id || null },
  };
  let shown = true;
  let error = null;
  try {
    await self.registration.showNotification(title, options);
  } catch (err) {
    shown = false;
    error = String(err?.message || err);
  }
  for (const page of await pages()) {
    page.postMessage({ type: "oberik.push", title, body: options.body, url, tag: options.tag, shown, error });
  }
}

self.addEventListener("push", (event) => {
  event.waitUntil(show(event.data));
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const url = event.notification.data?.url || self.registration.scope;
  event.waitUntil(
    (async () => {
      for (const page of await pages()) {
        if (page.url.startsWith(self.registration.scope) && "focus" in page) {
          page.postMessage({ type: "oberik.open", url });
          return page.focus();
        }
      }
      return self.clients.openWindow(url);
    })(),
  );
});
