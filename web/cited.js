// Split an answer into the segments a citation pill sits at the end of, the way the SDK's renderCited
// (and the Python client's render_cited) does: every segment in order, attributed or not, their texts
// concatenating to exactly `content`; a claim's markers become the citations they resolve to, and a
// marker nothing resolves (one the model invented) is dropped rather than drawn as a pill that leads
// nowhere.
//
// Offsets in `claims` count Unicode code points (they come from Python), so the text is sliced as an
// array of code points, not UTF-16 units: an emoji before a claim must not shift its pills.

export function renderCited(response) {
  const content = response?.content || "";
  const chars = Array.from(content);
  const byMarker = new Map();
  for (const c of response?.citations || []) {
    const key = c && c.marker !== undefined && c.marker !== null ? String(c.marker) : null;
    if (key !== null && !byMarker.has(key)) byMarker.set(key, c);
  }
  const spans = [];
  let cursor = 0;
  for (const claim of locate(response?.claims || [], chars)) {
    if (claim.start < cursor) continue; // overlapping claims: the first one wins
    if (claim.start > cursor) spans.push({ text: chars.slice(cursor, claim.start).join(""), citations: [] });
    const seen = new Set();
    const citations = [];
    for (const marker of claim.citations || []) {
      const key = String(marker);
      const citation = byMarker.get(key);
      if (citation && !seen.has(key)) {
        seen.add(key);
        citations.push(citation);
      }
    }
    spans.push({ text: chars.slice(claim.start, claim.end).join(""), citations });
    cursor = claim.end;
  }
  if (cursor < chars.length || spans.length === 0) {
    spans.push({ text: chars.slice(cursor).join(""), citations: [] });
  }
  return spans;
}

// Claims with a usable [start, end) span, in order. Offsets that are given must be in range (else the
// claim is plain text); a claim without offsets is found by its text, as the Python SDK does.
function locate(claims, chars) {
  const content = chars.join("");
  const out = [];
  for (const claim of claims) {
    if (!claim || typeof claim !== "object") continue;
    let { start, end } = claim;
    if (Number.isInteger(start) && Number.isInteger(end)) {
      if (!(start >= 0 && start < end && end <= chars.length)) continue;
    } else {
      if (typeof claim.text !== "string" || !claim.text) continue;
      const unit = content.indexOf(claim.text);
      if (unit < 0) continue;
      start = Array.from(content.slice(0, unit)).length;
      end = start + Array.from(claim.text).length;
    }
    out.push({ start, end, citations: Array.isArray(claim.citations) ? claim.citations : [] });
  }
  return out.sort((a, b) => a.start - b.start);
}
