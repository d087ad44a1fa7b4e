// Keeps the message list on the newest text while an answer streams, unless the person scrolled
// up to read; then a "Jump to latest" button takes them back down and following resumes.

const NEAR_BOTTOM = 32; // pixels: closer than this counts as "at the latest message"

export class Follower {
  constructor(scroller, jumpButton, { onJump = () => {} } = {}) {
    this.scroller = scroller;
    this.jumpButton = jumpButton;
    this.pinned = true;
    this.lastTop = 0;
    this.lastSize = this.size();
    scroller.addEventListener("scroll", () => this.onScroll(), { passive: true });
    // The chat's width changes when a panel opens or closes, which rewraps every line: a
    // follower at the bottom stays there. (The scroll the browser makes to clamp the position
    // is not the person's.)
    new ResizeObserver(() => this.resized()).observe(scroller);
    jumpButton.addEventListener("click", () => {
      this.jump();
      onJump();
    });
  }

  distance() {
    const { scrollHeight, scrollTop, clientHeight } = this.scroller;
    return scrollHeight - scrollTop - clientHeight;
  }

  size() {
    return `${this.scroller.clientWidth}x${this.scroller.clientHeight}`;
  }

  resized() {
    this.lastSize = this.size();
    if (this.pinned) this.toBottom();
    else this.update();
  }

  // Content growth never fires `scroll`, so a scroll event that moved up is the person's doing,
  // unless the scroller's size changed since the last one (a panel opened or closed).
  onScroll() {
    if (this.size() !== this.lastSize) {
      this.resized();
      return;
    }
    const top = this.scroller.scrollTop;
    if (this.distance() <= NEAR_BOTTOM) this.pinned = true;
    else if (top < this.lastTop) this.pinned = false;
    this.lastTop = top;
    this.update();
  }

  // After every change of the list's content.
  contentChanged() {
    if (this.pinned) this.toBottom();
    else this.update();
  }

  toBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
    this.lastTop = this.scroller.scrollTop;
    this.update();
  }

  jump() {
    this.pinned = true;
    this.toBottom();
  }

  // A new transcript or a new message of the person's own: back to following.
  reset() {
    this.pinned = true;
    this.toBottom();
  }

  update() {
    this.jumpButton.hidden = this.pinned || this.distance() <= NEAR_BOTTOM;
  }
}
