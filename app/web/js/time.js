// Timestamps from the API, shown in the person's local time zone and language.
//
// The API sends ISO 8601 with a zone ("2026-12-01T07:43:00.903074Z"); a value without a zone is
// UTC as well (earlier servers stored naive UTC), never the browser's local time.

const HAS_ZONE = /(?:[zZ]|[+-]\d{2}(?::?\d{2})?)$/;

export function parseTimestamp(value) {
  if (typeof value !== "string" || !value.trim()) return null;
  let text = value.trim().replace(" ", "T");
  // Date.parse is only specified for milliseconds: keep three fraction digits.
  text = text.replace(/(\.\d{3})\d+/, "$1");
  if (!HAS_ZONE.test(text)) text += "Z";
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? null : date;
}

const timeFormat = new Intl.DateTimeFormat(undefined, { hour: "numeric", minute: "2-digit" });
const dayFormat = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric" });
const fullFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "short" });
const monthFormat = new Intl.DateTimeFormat(undefined, { month: "long", year: "numeric" });

function startOfDay(date) {
  return new Date(date.getFullYear(), date.getMonth(), date.getDate());
}

function daysBetween(earlier, later) {
  return Math.round((startOfDay(later) - startOfDay(earlier)) / 86_400_000);
}

// "14:05" today, "Dec 1, 14:05" on another day.
export function shortWhen(date, now = new Date()) {
  if (daysBetween(date, now) === 0) return timeFormat.format(date);
  return `${dayFormat.format(date)}, ${timeFormat.format(date)}`;
}

export function fullWhen(date) {
  return fullFormat.format(date);
}

// The heading a conversation is listed under, by its last activity in local time.
export function dayGroup(date, now = new Date()) {
  const days = daysBetween(date, now);
  if (days <= 0) return "Today";
  if (days === 1) return "Yesterday";
  if (days < 7) return "Previous 7 days";
  if (days < 30) return "Previous 30 days";
  return monthFormat.format(date);
}

// A <time> element: machine-readable UTC, readable local text, the full date as a tooltip.
export function timeElement(value, now = new Date()) {
  const date = parseTimestamp(value);
  const element = document.createElement("time");
  if (!date) return element;
  element.dateTime = date.toISOString();
  element.textContent = shortWhen(date, now);
  element.title = fullWhen(date);
  return element;
}

const relativeFormat = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
const STEPS = [["year", 31_536_000], ["month", 2_592_000], ["week", 604_800], ["day", 86_400],
  ["hour", 3_600], ["minute", 60]];

// "2 minutes ago", "yesterday", "just now": how long ago `date` was.
export function relativeWhen(date, now = new Date()) {
  const seconds = Math.round((now - date) / 1000);
  if (seconds < 45) return "just now";
  for (const [unit, size] of STEPS) {
    if (seconds >= size) return relativeFormat.format(-Math.round(seconds / size), unit);
  }
  return relativeFormat.format(-1, "minute");
}
