// The course book's page script: the search box over window.BOOK_SEARCH (search-index.js,
// written at build time from MyST's search records) and the Mermaid maps. No network, no server.
(function () {
  "use strict";

  function words(text) {
    return text.toLowerCase().split(/[^a-z0-9_.-]+/).filter(Boolean);
  }

  function search(query) {
    const wanted = words(query);
    if (!wanted.length) return [];
    const found = [];
    for (const entry of window.BOOK_SEARCH || []) {
      const title = (entry.page + " " + entry.section).toLowerCase();
      const text = entry.text.toLowerCase();
      let score = 0;
      for (const word of wanted) {
        if (title.includes(word)) score += 3;
        else if (text.includes(word)) score += 1;
        else { score = 0; break; }
      }
      if (score) found.push({ entry, score });
    }
    found.sort((a, b) => b.score - a.score);
    return found.slice(0, 12).map((item) => item.entry);
  }

  function snippet(text, query) {
    const first = words(query)[0] || "";
    const at = Math.max(0, text.toLowerCase().indexOf(first) - 40);
    return (at ? "… " : "") + text.slice(at, at + 140) + "…";
  }

  function showResults(box, list) {
    list.textContent = "";
    const query = box.value.trim();
    const results = search(query);
    if (query && !results.length) {
      const none = document.createElement("li");
      none.className = "none";
      none.textContent = "No page has all of these words.";
      list.appendChild(none);
    }
    for (const entry of results) {
      const item = document.createElement("li");
      const link = document.createElement("a");
      link.href = entry.href;
      link.textContent = entry.section === entry.page ? entry.page : entry.page + " › " + entry.section;
      const text = document.createElement("span");
      text.textContent = snippet(entry.text, query);
      item.append(link, text);
      list.appendChild(item);
    }
  }

  function drawMaps() {
    if (!window.mermaid) return;
    window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });
    window.mermaid.run({ querySelector: "pre.mermaid" }).catch((error) => console.error("mermaid:", error));
  }

  // Worked answers (labkit/practice/worked_answers.py): each <details> stays shut until the
  // learner's box above it holds enough words, as the notebook's button does.
  function guardWorkedAnswers() {
    for (const block of document.querySelectorAll(".worked-answers")) {
      const mine = block.querySelector("textarea.worked-mine");
      const needed = Number(block.dataset.words || 0);
      const enough = () => words(mine ? mine.value : "").length >= needed;
      for (const answer of block.querySelectorAll("details.worked-answer")) {
        const summary = answer.querySelector("summary");
        summary.addEventListener("click", (event) => {
          if (answer.open || enough()) return;
          event.preventDefault();
          if (mine) mine.placeholder = "write your answer first (" + needed + " words), then open the answers";
        });
      }
    }
  }

  const box = document.getElementById("book-search");
  const list = document.getElementById("book-search-results");
  if (box && list) box.addEventListener("input", () => showResults(box, list));
  drawMaps();
  guardWorkedAnswers();
})();
