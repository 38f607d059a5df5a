// The page's address says what is on screen, so that a link reproduces it and back/forward walk
// the selections: ?url=<each URL, or the Hub model as typed> (no url: the demo), &tensor=<name>,
// &tab=<id>, &view=<the heatmap's {plane, index, region}>; &hub=<mirror> is kept. A file from the user's disk cannot be in a link (it is not
// anywhere a link can point), and copying the link says so.

export function readLink() {
  const q = new URLSearchParams(location.search);
  let view = null;
  try {
    view = q.get("view") ? JSON.parse(q.get("view")) : null;
  } catch { /* a damaged view is ignored: the default view is shown */ }
  return {urls: q.getAll("url").filter(Boolean), tensor: q.get("tensor"), tab: q.get("tab"), view};
}

// Write the address for {urls, tensor, tab}; `push`: a new history entry (a selection), else
// the current one is replaced (the same selection seen another way).
export function writeLink({urls, tensor, tab, view}, push) {
  const q = new URLSearchParams();
  const hub = new URLSearchParams(location.search).get("hub");
  if (hub) q.set("hub", hub);
  for (const url of urls) q.append("url", url);
  if (tensor) q.set("tensor", tensor);
  if (tab) q.set("tab", tab);
  if (view) q.set("view", JSON.stringify(view));
  const href = `${location.pathname}${q.size ? `?${q}` : ""}`;
  if (href === `${location.pathname}${location.search}`) return;
  history[push ? "pushState" : "replaceState"]({tensor, tab, view}, "", href);
}
