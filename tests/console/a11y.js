// An accessibility audit of the current page, run by the console tests on every console page
// they visit. Returns a list of problems (empty when the page passes). It checks what a
// machine can check reliably: a language, a heading, an accessible name for every control,
// link and button, no positive tabindex (focus follows the document order), unique ids, alt
// text, a visible focus indicator, and WCAG AA contrast of text against its background.
const problems = [];
const name = (el) => {
  const own = (el.getAttribute('aria-label') || el.getAttribute('title') || '').trim();
  if (own) return own;
  const by = el.getAttribute('aria-labelledby');
  if (by) return by.split(/\s+/).map((id) => (document.getElementById(id) || {}).textContent || '').join(' ').trim();
  return '';
};
const where = (el) => {
  const id = el.id ? '#' + el.id : '';
  const cls = el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\s+/).join('.') : '';
  return `${el.tagName.toLowerCase()}${id}${cls} "${(el.innerText || el.value || '').trim().slice(0, 40)}"`;
};
const visible = (el) => {
  const r = el.getBoundingClientRect();
  const s = getComputedStyle(el);
  return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none';
};
if (!document.documentElement.lang) problems.push('html has no lang');
if (!document.querySelector('h1')) problems.push('no h1');
for (const el of document.querySelectorAll('input:not([type=hidden]):not([type=submit]):not([type=button]), select, textarea')) {
  if (el.labels.length === 0 && !name(el)) problems.push('control without a label: ' + where(el));
}
for (const el of document.querySelectorAll('a[href], button, input[type=submit], input[type=button]')) {
  if (!visible(el)) continue;
  if (!(el.innerText || el.value || '').trim() && !name(el)) problems.push('link or button without a name: ' + where(el));
}
for (const el of document.querySelectorAll('[tabindex]')) {
  if (parseInt(el.getAttribute('tabindex'), 10) > 0) problems.push('positive tabindex: ' + where(el));
}
const ids = new Map();
for (const el of document.querySelectorAll('[id]')) ids.set(el.id, (ids.get(el.id) || 0) + 1);
for (const [id, n] of ids) if (n > 1) problems.push(`id "${id}" used ${n} times`);
for (const el of document.querySelectorAll('img:not([alt])')) problems.push('image without alt: ' + where(el));

// A visible focus indicator on the first focusable control.
const first = [...document.querySelectorAll('a[href], button, input:not([type=hidden]), select, textarea')].find(visible);
if (first) {
  first.focus();
  const s = getComputedStyle(first);
  // Without the focus, Chromium matches no :focus rule, and the check would say nothing.
  if (!document.hasFocus()) problems.push('the page does not have the focus: its focus indicator cannot be checked');
  else if (s.outlineStyle === 'none' || parseFloat(s.outlineWidth) === 0) problems.push('no focus indicator on ' + where(first));
  first.blur();
}

// Contrast (WCAG 2 AA): 4.5:1 for text, 3:1 for large text.
const rgba = (c) => {
  const m = c.match(/rgba?\(([^)]+)\)/);
  if (!m) return [0, 0, 0, 0];
  const p = m[1].split(',').map((x) => parseFloat(x));
  return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
};
const lum = ([r, g, b]) => {
  const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
};
const background = (el) => {
  for (let e = el; e; e = e.parentElement) {
    const c = rgba(getComputedStyle(e).backgroundColor);
    if (c[3] > 0.5) return c;
  }
  return [255, 255, 255, 1];
};
for (const el of document.body.querySelectorAll('*')) {
  const text = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  if (!text || !visible(el)) continue;
  const s = getComputedStyle(el);
  const fg = rgba(s.color);
  const bg = background(el);
  const [a, b] = [lum(fg), lum(bg)];
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  const size = parseFloat(s.fontSize);
  const large = size >= 24 || (size >= 18.66 && parseInt(s.fontWeight, 10) >= 700);
  if (ratio < (large ? 3 : 4.5)) problems.push(`contrast ${ratio.toFixed(2)}:1 on ${where(el)}`);
}
return problems;
