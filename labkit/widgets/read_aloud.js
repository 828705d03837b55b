// Read aloud: the lesson's sections spoken by the browser's own speech synthesis.
// The model gives `lesson` (a title) and `sections` ([{title, sentences}]); everything
// else (which section, playing or not, speed) lives here, in the browser, with no kernel
// round trip. The same module runs in JupyterLab (anywidget) and on the course book's
// static pages (a small stand-in model, labkit/widgets/read_aloud.py).

const STYLE = `
.labkit-read-aloud { font-family: sans-serif; border: 1px solid #c8c8c8; border-radius: 6px;
  padding: 8px 10px; max-width: 60em; background: #fafafa; color: #222; }
.labkit-read-aloud button { margin-right: 4px; padding: 2px 10px; }
.labkit-read-aloud .labkit-read-where { font-weight: bold; margin: 6px 0 4px; }
.labkit-read-aloud .labkit-read-text { max-height: 9em; overflow-y: auto; line-height: 1.45; }
.labkit-read-aloud .labkit-read-text mark { background: #ffe27a; }
.labkit-read-aloud .labkit-read-missing { color: #8a1c1c; margin-top: 4px; }
.labkit-reading { outline: 3px solid #ffcc33; outline-offset: 2px; }`;

function addStyle() {
  if (document.getElementById("labkit-read-aloud-style")) return;
  const style = document.createElement("style");
  style.id = "labkit-read-aloud-style";
  style.textContent = STYLE;
  document.head.appendChild(style);
}

function speechAvailable() {
  return typeof window.speechSynthesis !== "undefined" && window.speechSynthesis !== null
    && typeof window.SpeechSynthesisUtterance === "function";
}

const squash = (text) => (text || "").toLowerCase().replace(/[^a-z0-9]+/g, "");

// Outline the page's heading of the section being read (JupyterLab's rendered markdown or
// a book page), if one matches its title: a help for the eye, never needed to work.
function markHeading(title) {
  document.querySelectorAll(".labkit-reading").forEach((node) => node.classList.remove("labkit-reading"));
  if (title === null) return;
  const wanted = squash(title);
  for (const heading of document.querySelectorAll("h1, h2, h3, h4, h5, h6")) {
    if (heading.closest(".labkit-read-aloud") || squash(heading.textContent) !== wanted) continue;
    (heading.closest(".jp-Cell") || heading).classList.add("labkit-reading");
    return;
  }
}

function button(label, title) {
  const node = document.createElement("button");
  node.textContent = label;
  node.title = title;
  return node;
}

function render({ model, el }) {
  addStyle();
  const sections = model.get("sections") || [];
  const box = document.createElement("div");
  box.className = "labkit-read-aloud";
  const controls = document.createElement("div");
  const previous = button("« previous", "previous section");
  const play = button("▶ play", "read this section aloud, then the next ones");
  const next = button("next »", "next section");
  const speed = document.createElement("select");
  speed.title = "speed";
  for (const rate of [0.75, 1, 1.25, 1.5, 2]) {
    const option = document.createElement("option");
    option.value = String(rate);
    option.textContent = `${rate}×`;
    option.selected = rate === 1;
    speed.appendChild(option);
  }
  const speedLabel = document.createElement("label");
  speedLabel.append(" speed ", speed);
  controls.append(previous, play, next, speedLabel);
  const where = document.createElement("div");
  where.className = "labkit-read-where";
  const text = document.createElement("div");
  text.className = "labkit-read-text";
  box.append(controls, where, text);
  el.appendChild(box);

  const state = { section: 0, sentence: 0, playing: false, run: 0 };

  function show() {
    const current = sections[state.section];
    where.textContent = current
      ? `Section ${state.section + 1} of ${sections.length}: ${current.title}`
      : "This lesson has no text to read.";
    text.replaceChildren();
    (current ? current.sentences : []).forEach((sentence, index) => {
      const part = document.createElement(state.playing && index === state.sentence ? "mark" : "span");
      part.textContent = sentence + " ";
      text.appendChild(part);
    });
    text.querySelector("mark")?.scrollIntoView?.({ block: "nearest" });
    play.textContent = state.playing ? "pause" : "▶ play";
    previous.disabled = state.section === 0;
    next.disabled = state.section >= sections.length - 1;
    box.dataset.section = String(state.section);
    box.dataset.playing = String(state.playing);
  }

  if (!speechAvailable()) {
    const missing = document.createElement("div");
    missing.className = "labkit-read-missing";
    missing.textContent = "Read aloud needs speech synthesis (the Web Speech API), and this browser has none. "
      + "The text is below to read yourself.";
    box.insertBefore(missing, where);
    play.disabled = true;
    speed.disabled = true;
    previous.onclick = () => { state.section = Math.max(0, state.section - 1); show(); };
    next.onclick = () => { state.section = Math.min(sections.length - 1, state.section + 1); show(); };
    show();
    return () => {};
  }
  const synth = window.speechSynthesis;

  // One utterance per sentence: Chrome stops a long utterance after about 15 seconds, and
  // a sentence is where pause and speed changes pick up again.
  function speakFromHere() {
    const run = ++state.run;
    synth.cancel();
    const current = sections[state.section];
    if (!current) { stop(); return; }
    const startAt = state.sentence;
    current.sentences.slice(state.sentence).forEach((sentence, offset) => {
      const utterance = new window.SpeechSynthesisUtterance(sentence);
      utterance.rate = Number(speed.value);
      utterance.lang = "en-US";
      utterance.onstart = () => {
        if (run !== state.run) return;
        state.sentence = startAt + offset;
        show();
      };
      utterance.onend = () => {
        if (run !== state.run || offset + startAt !== current.sentences.length - 1) return;
        if (state.section < sections.length - 1) {  // the section is done: on to the next one
          state.section += 1;
          state.sentence = 0;
          markHeading(sections[state.section].title);
          speakFromHere();
        } else {
          stop();
        }
      };
      synth.speak(utterance);
    });
    markHeading(current.title);
    show();
  }

  function stop() {
    state.playing = false;
    state.run += 1;  // an utterance still ending belongs to an old run and is ignored
    synth.cancel();
    markHeading(null);
    show();
  }

  function go(section) {
    state.section = Math.max(0, Math.min(sections.length - 1, section));
    state.sentence = 0;
    if (state.playing) speakFromHere(); else show();
  }

  play.onclick = () => {
    if (state.playing) {
      // pausing cancels the queue and remembers the sentence: Chrome's own pause() does
      // not hold on every voice, and resume() can stay silent
      const sentence = state.sentence;
      stop();
      state.sentence = sentence;
      show();
    } else {
      state.playing = true;
      speakFromHere();
    }
  };
  previous.onclick = () => go(state.section - 1);
  next.onclick = () => go(state.section + 1);
  speed.onchange = () => { if (state.playing) speakFromHere(); };
  show();
  return () => { if (state.playing) stop(); };
}

export default { render };
