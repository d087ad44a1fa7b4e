// A message the server refused before its turn began (a per-user limit: 429 rate_limited). It
// was never stored, so the page does not pretend it was: it leaves the conversation, goes back
// into the message box, and a countdown (ticking, not frozen) says when it can be sent again.

const plural = (count, unit) => `${count} ${unit}${count === 1 ? "" : "s"}`;

function waitText(seconds) {
  if (seconds <= 0) return "You can send it again now.";
  if (seconds < 120) return `You can send it again in ${plural(seconds, "second")}.`;
  if (seconds < 5400) return `You can send it again in about ${plural(Math.ceil(seconds / 60), "minute")}.`;
  return `You can send it again in about ${plural(Math.round(seconds / 3600), "hour")}.`;
}

export class Refusal {
  // `element`: the countdown line (not a live region: it changes every second); `notice`:
  // the chat's notice, which says once what happened, and once when the wait is over.
  constructor({ element, notice }) {
    this.element = element;
    this.notice = notice;
    this.timer = 0;
  }

  show(error) {
    this.clear();
    this.notice.show(`Limit reached: ${error.message} Your message was not sent; it is back in the message box.`,
      "error");
    const seconds = error.retryAfter ?? 0;
    this.until = Date.now() + seconds * 1000;
    this.element.hidden = false;
    this.tick();
    if (seconds > 0) this.timer = setInterval(() => this.tick(), 1000);
  }

  tick() {
    const left = Math.max(0, Math.ceil((this.until - Date.now()) / 1000));
    this.element.textContent = waitText(left);
    if (left === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = 0;
      this.notice.show("The limit has cleared: you can send your message again.", "info");
    }
  }

  clear() {
    if (this.timer) clearInterval(this.timer);
    this.timer = 0;
    this.element.hidden = true;
    this.element.textContent = "";
  }
}
