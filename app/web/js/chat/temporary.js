// The "Temporary chat" switch of a new chat and the banner that stays while a temporary chat is
// shown. A temporary chat reads no memory and saves none, is never listed, searched or exported,
// and is deleted after a day (docs/privacy.md): the banner keeps that visible the whole time.

export class TemporaryChat {
  constructor({ field, toggle, banner }) {
    this.field = field; // the switch's wrapper, shown on a new chat outside projects
    this.toggle = toggle; // the checkbox
    this.banner = banner;
    this.active = false; // the chat shown is temporary (or about to be, on a new chat)
    toggle.addEventListener("change", () => this.show(toggle.checked));
  }

  // Whether the next message starts a temporary chat.
  get wanted() {
    return !this.field.hidden && this.toggle.checked;
  }

  // A new chat: the switch is offered outside projects, and keeps its position.
  offer(available) {
    this.field.hidden = !available;
    if (!available) this.toggle.checked = false;
    this.show(available && this.toggle.checked);
  }

  // A conversation is shown: temporary or not, the switch is gone (it applies to new chats).
  opened(temporary) {
    this.field.hidden = true;
    this.show(Boolean(temporary));
  }

  show(active) {
    this.active = active;
    this.banner.hidden = !active;
    document.body.classList.toggle("temporary-chat", active);
  }

  reset() {
    this.toggle.checked = false;
    this.field.hidden = true;
    this.show(false);
  }
}
