// The colour theme: the system's (the default), or light or dark as the person chose, kept on
// this device (a preference, not personal data). The choice is `data-theme` on the root
// element; css/theme.css gives it the matching tokens.

const THEME_PREFERENCE = "agent-memory-theme";
const THEMES = ["system", "light", "dark"];

export function savedTheme() {
  const saved = localStorage.getItem(THEME_PREFERENCE);
  return THEMES.includes(saved) ? saved : "system";
}

export function applyTheme(theme) {
  const root = document.documentElement;
  if (theme === "system") delete root.dataset.theme;
  else root.dataset.theme = theme;
}

// Applied at once (before the page is shown), then kept in step with `select`.
export function wireTheme(select) {
  select.value = savedTheme();
  select.addEventListener("change", () => {
    const theme = THEMES.includes(select.value) ? select.value : "system";
    localStorage.setItem(THEME_PREFERENCE, theme);
    applyTheme(theme);
  });
}

applyTheme(savedTheme());
