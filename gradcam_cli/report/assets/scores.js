/* gradcam report page, the part for cards whose map explains a score, not a class's probability (report/scores.py): a
 * CLIP-style model's prompts, an embedding model's reference images, a regression's outputs. A classic script loaded
 * before app.js, which calls window.GRADCAM_SCORES(kit) once when header.scores is set; kit holds app.js's helpers
 * (esc, url, num, plural, classKey, keyLabel, thumbHtml, nameHtml, collator, $) and the table (kit.table = header.scores).
 *
 * Such a card has no probability, no predicted class, no right or wrong and no place in the confusion matrix: it says
 * its score as the model gives it, and a prompt's card the image's other prompts with theirs.
 *
 * Hooks for scripts and tests (stable), shown only where such cards are:
 *   #filter-class   select: "" all, "=KEY" the cards of one prompt (reference set, output): KEY its text (name), or its
 *                   index when it has none; #ctl-class-label reads "Prompt" ("Reference", "Output") when every card
 *                   the select keys is of that kind
 *   #filter-best    select: "" all, "true" the cards whose prompt is its image's best match, "false" the others (shown
 *                   when some image was scored against several prompts)
 *   #sort           also "score"
 *   #scores         the table per prompt: buttons [data-filter="score"][data-key="=KEY"] (its images) and
 *                   [data-filter="best"][data-key="=KEY"] (those it was the best match of)
 *   Cards: article.card.card-score with data-id, data-input, data-kind ("prompt"|"reference"|"regression"), data-class
 *     (the prompt's text, the references' name, or the output's index), data-score ("" when none), data-best ("true"|
 *     "false"|""), data-blank, data-ok ("true"). Inside: .prompt-text (a prompt, as given), .score (the score as
 *     shown), and a reference's .refs > .ref[data-name] (each reference image: a link to it holding its thumbnail).
 */
window.GRADCAM_SCORES = function (kit) {
  "use strict";
  var T = kit.table, esc = kit.esc, num = kit.num, $ = kit.$;
  var WORDS = {
    prompt: {
      what: "prompt", score: "similarity", many: "Prompts", one: "Prompt",
      title: "the image and this text as the model scores the pair: its logit scale times the cosine similarity of their embeddings",
    },
    reference: {
      what: "like", score: "cosine similarity", many: "References", one: "Reference",
      title: "the cosine similarity of the image's embedding to the reference images' (their mean)",
    },
    regression: { what: "output", score: "value", many: "Outputs", one: "Output", title: "the output's raw value, no probability" },
  };
  var kinds = Array.isArray(T.kinds) ? T.kinds.filter(function (k) { return WORDS.hasOwnProperty(k); }) : [];
  var words = kinds.length === 1 ? WORDS[kinds[0]] : { many: "Scores", one: "Target" };

  function is(c) {
    return !!c && !!c.ok && WORDS.hasOwnProperty(c.target);
  }
  function label(c) {
    return c.class_name != null && c.class_name !== "" ? String(c.class_name) : c.class_index != null ? String(c.class_index) : "";
  }
  function score(kind, v) {
    if (typeof v !== "number" || !isFinite(v)) return "–";
    return kind === "reference" ? v.toFixed(3) : String(Number(v.toPrecision(4)));
  }
  function attr(v) {
    return typeof v === "number" ? String(v) : "";
  }

  // a scored card: the photo and its map, what it was scored against and how, the image's other prompts
  function cardHtml(c, j) {
    var cls = label(c), w = WORDS[c.target];
    var h = '<article class="card card-score" data-id="' + esc(c.id != null ? c.id : j) + '" data-input="' + esc(c.input) + '" data-kind="' + esc(c.target) + '" data-class="' + esc(cls) + '" data-score="' + attr(c.score) + '" data-best="' + (c.best === true ? "true" : c.best === false ? "false" : "") + '" data-blank="' + (c.blank ? "true" : "false") + '" data-ok="true">';
    h += '<div class="thumbs">' + kit.thumbHtml(c.thumb, c.original, "original", c) + kit.thumbHtml(c.overlay_thumb, c.overlay, "overlay", c) + "</div>";
    h += '<div class="body">' + kit.nameHtml(c);
    var b = "";
    if (c.best === true) b += '<span class="badge badge-good" title="of the prompts this image was scored against, this one scores highest">best match</span>';
    if (c.blank) b += '<span class="badge badge-warn" title="the heat map is blank: no evidence for this score at this layer">blank</span>';
    if (b) h += '<div class="badges">' + b + "</div>";
    if (c.target === "prompt") {
      h += '<div class="line line-prompt"><span class="k">prompt</span> <span class="cls prompt-text" title="' + esc(cls) + '">' + esc(cls) + "</span></div>";
    } else {
      h += '<div class="line"><span class="k">' + w.what + '</span> <b class="cls" title="' + esc(cls) + '">' + esc(cls) + "</b>";
      if (c.class_name && c.class_index != null && c.target === "regression") h += ' <span class="muted">#' + esc(c.class_index) + "</span>";
      h += "</div>";
    }
    h += '<div class="line"><span class="k" title="' + esc(w.title) + '">' + w.score + '</span> <b class="score" title="' + esc(w.title) + '">' + score(c.target, c.score) + "</b></div>";
    if (c.target === "prompt" && Array.isArray(c.prompt_scores) && c.prompt_scores.length > 1) h += promptList(c);
    if (c.target === "reference") h += references(c);
    var meta = [c.model, c.method, (c.layers || []).join(", ")].filter(function (x) { return x; });
    if (meta.length) h += '<div class="meta">' + meta.map(function (m) { return "<bdi>" + esc(m) + "</bdi>"; }).join(" · ") + "</div>";
    var links = [];
    if (kit.url(c.original)) links.push('<a href="' + esc(kit.url(c.original)) + '" target="_blank" rel="noopener">original</a>');
    if (kit.url(c.overlay)) links.push('<a href="' + esc(kit.url(c.overlay)) + '" target="_blank" rel="noopener">overlay</a>');
    if (kit.url(c.npy)) links.push('<a class="npy" href="' + esc(kit.url(c.npy)) + '">.npy</a>');
    if (links.length) h += '<div class="links">' + links.join("") + "</div>";
    return h + "</div></article>";
  }

  // the image's prompts, the highest score first, this card's in bold
  function promptList(c) {
    var h = '<ol class="topk prompts" title="the prompts this image was scored against, the highest first">';
    c.prompt_scores.forEach(function (e) {
      var name = e.name != null && e.name !== "" ? String(e.name) : String(e.index);
      var own = c.class_index != null ? e.index === c.class_index : name === label(c);
      h += '<li class="' + (own ? "is-explained" : "") + '"><span class="tn">' + esc(name) + '</span><span class="tp">' + score("prompt", e.score) + "</span></li>";
    });
    return h + "</ol>";
  }

  // a reference's card: each reference image, its thumbnail linked to the file (its name where it was not found)
  function references(c) {
    var refs = Array.isArray(c.references) ? c.references : [];
    if (!refs.length) return "";
    var h = '<div class="refs" title="' + (refs.length === 1 ? "the reference image" : "the reference images (their mean embedding)") + '">';
    refs.forEach(function (r) {
      var name = String(r.name != null && r.name !== "" ? r.name : r.input), full = kit.url(r.original), src = kit.url(r.thumb);
      var w = r.thumb_w > 0 ? Math.round(r.thumb_w) : 4, ht = r.thumb_h > 0 ? Math.round(r.thumb_h) : 3;
      var inner = src
        ? '<img src="' + esc(src) + '" loading="lazy" decoding="async" width="' + w + '" height="' + ht + '" alt="reference ' + esc(name) + '">'
        : '<span class="ref-missing">' + esc(name) + "</span>";
      var tip = esc(String(r.input != null ? r.input : name)) + (full ? "" : " (not found)");
      h += full
        ? '<a class="ref" data-name="' + esc(name) + '" href="' + esc(full) + '" target="_blank" rel="noopener" title="' + tip + '">' + inner + "</a>"
        : '<span class="ref" data-name="' + esc(name) + '" title="' + tip + '">' + inner + "</span>";
    });
    return h + "</div>";
  }

  // the table per prompt (reference set, output), in place of the classes table; a click on a number shows those cards
  function renderTable() {
    $("panel-scores").hidden = false;
    $("scores-title").textContent = words.many;
    var ranked = !!T.ranked, rows = Array.isArray(T.rows) ? T.rows : [];
    var h = '<table class="classes score-classes"><thead><tr><th class="l">' + esc(words.one.toLowerCase()) + '</th><th title="images scored against it">images</th>';
    if (ranked) h += '<th title="images where it scores highest of their prompts">best match</th>';
    h += '<th title="its mean score">mean</th><th title="its lowest score">min</th><th title="its highest score">max</th></tr></thead><tbody>';
    rows.forEach(function (e) {
      var key = kit.classKey(e.class_name, e.class_index) || "", text = kit.keyLabel(key || "=?");
      h += '<tr><td class="l" title="' + esc(text) + '">' + esc(text) + "</td>" + cell(e.images, "score", key);
      if (ranked) h += cell(e.best, "best", key);
      h += "<td>" + score(e.target, e.mean) + "</td><td>" + score(e.target, e.min) + "</td><td>" + score(e.target, e.max) + "</td></tr>";
    });
    h += "</tbody></table>";
    var note = plural(rows.length, words.one.toLowerCase()) + (ranked ? ", the most best matches first" : ", the highest mean first") + "; click a number to filter.";
    $("scores").innerHTML = '<p class="muted small">' + esc(note) + "</p>" + h;
  }
  function cell(n, filter, key) {
    if (!n) return '<td><span class="zero">0</span></td>';
    return '<td><button type="button" data-filter="' + filter + '" data-key="' + esc(key) + '">' + num(n) + "</button></td>";
  }
  function plural(n, word) {
    return kit.plural(n, word);
  }

  // its controls: the prompt (beside a detector's or a segmenter's classes, where the report holds both), best match
  function fillControls() {
    var select = $("filter-class"), shared = select.options.length > 0;
    $("ctl-class").hidden = false;
    $("ctl-class-label").textContent = shared ? "Class" : words.one;
    var rows = (Array.isArray(T.rows) ? T.rows : []).slice().sort(function (a, b) {
      return kit.collator.compare(kit.keyLabel(kit.classKey(a.class_name, a.class_index) || "=?"), kit.keyLabel(kit.classKey(b.class_name, b.class_index) || "=?"));
    });
    var h = shared ? "" : '<option value="">all ' + esc(words.many.toLowerCase()) + "</option>";
    rows.forEach(function (e) {
      var key = kit.classKey(e.class_name, e.class_index);
      if (key) h += '<option value="' + esc(key) + '">' + esc(kit.keyLabel(key)) + " (" + num(e.images) + ")</option>";
    });
    select.insertAdjacentHTML("beforeend", h);
    $("ctl-best").hidden = !T.ranked;
  }

  // whether a card passes the best-match filter (a card of another kind never does while it is set)
  function keep(f, c) {
    return !f.best || (is(c) && (c.best === true ? "true" : c.best === false ? "false" : "") === f.best);
  }

  return { is: is, cardHtml: cardHtml, renderTable: renderTable, fillControls: fillControls, keep: keep };
};
