// The page's project parts, built and tied to the chat: the sidebar's project rows, a project's
// page and Move; and `showPlace`, which shows where the chat is (in a project or outside
// projects) in the header, on the project's page, in the memory panel's labels and in the
// composer's hint.

import { $ } from "./dom.js";
import { MoveDialog, ProjectPage } from "./project-page.js";
import { ProjectRows } from "./projects.js";

// `page` holds the page's other parts ({chat, conversations, memory, search, title, notice}); they are
// read when used, so it may be filled in after this call.
export function projectParts(page) {
  const error = (text) => page.notice.show(text, "error");
  const rows = new ProjectRows({
    root: $("project-list"),
    empty: $("projects-empty"),
    newButton: $("new-project"),
    form: $("new-project-form"),
    input: $("new-project-name"),
    onOpen: (projectId) => page.chat.newConversation({ projectId }),
    onCreated: async (project) => {
      await page.conversations.load();
      page.chat.newConversation({ projectId: project.id });
      page.notice.show(`Project “${project.name}” created: chats started here keep their own notes.`,
        "success");
    },
    onError: error,
  });
  const projectPage = new ProjectPage({
    welcome: $("welcome"),
    onOpen: (id) => page.chat.open(id),
    onChanged: async (project) => {
      await page.conversations.load();
      if (page.chat.projectId === project.id) await page.memory.load();
    },
    onDeleted: async (projectId, choice) => {
      const { chat } = page;
      if (chat.projectId === projectId) {
        // The chat was in it: a conversation moved out is reopened there, else a new chat.
        if (chat.conversationId && choice === "detach") {
          chat.open(chat.conversationId, null, { fromAddress: true });
        } else {
          chat.newConversation();
        }
      }
      await page.conversations.load();
      page.notice.show({ delete: "Project deleted, with its conversations.",
        detach: "Project deleted: its conversations are now outside projects." }[choice]
        || "Project deleted.", "success");
    },
    onError: error,
  });
  const move = new MoveDialog({
    onMoved: async (id, projectId) => {
      await page.conversations.load();
      if (page.chat.conversationId === id) page.chat.place(id, projectId);
      const project = page.conversations.project(projectId);
      page.notice.show(project ? `Moved to “${project.name}”.` : "Moved out of the project.", "success");
    },
  });
  $("move-conversation").addEventListener("click", () => move.open(page.chat.conversationId,
    page.chat.projectId, page.conversations.projects));

  // Runs on each move of the chat and after each load of the list.
  const showPlace = () => {
    const { chat, conversations } = page;
    const project = conversations.project(chat.projectId);
    page.title.showProject(project, chat.conversationId);
    projectPage.show(chat.conversationId ? null : project,
      project ? conversations.inProject(project.id) : []);
    page.memory.setProjects(conversations.projects);
    page.search.setProject(project);
    $("message-input").placeholder = project ? `Message the assistant in “${project.name}”`
      : "Message the assistant";
    if (chat.projectId && !chat.conversationId && conversations.loaded && !project) chat.projectNotFound();
  };
  return { rows, projectPage, move, showPlace };
}
