// The composer: the message box with Send, which becomes Stop while an answer streams.
// Enter sends, Shift+Enter starts a new line, Escape stops.

export class Composer {
  constructor({ form, input, send, stop, onSend, onStop }) {
    this.form = form;
    this.input = input;
    this.sendButton = send;
    this.stopButton = stop;
    this.streaming = false;
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const text = input.value.trim();
      if (!text || this.streaming) return;
      input.value = "";
      onSend(text);
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        form.requestSubmit();
      } else if (event.key === "Escape" && this.streaming) {
        onStop();
      }
    });
    stop.addEventListener("click", onStop);
  }

  // Send and Stop share one place; focus follows the button that takes it over.
  setStreaming(streaming) {
    this.streaming = streaming;
    const hadFocus = document.activeElement === (streaming ? this.sendButton : this.stopButton);
    this.sendButton.hidden = streaming;
    this.stopButton.hidden = !streaming;
    this.form.classList.toggle("streaming", streaming);
    if (hadFocus) (streaming ? this.stopButton : this.input).focus({ preventScroll: true });
  }

  fill(text) {
    this.input.value = text;
    this.focus();
    this.input.setSelectionRange(text.length, text.length);
  }

  focus() {
    this.input.focus({ preventScroll: true });
  }

  reset() {
    this.input.value = "";
    this.setStreaming(false);
  }
}
