/* gradcam report page: draws window.GRADCAM_REPORT, set by data.js (its shape: REPORT_SCHEMA in
 * gradcam_cli/report/page.py). A classic script, no modules, no fetch, no libraries: it runs from file://.
 *
 * Sorting and filtering work on plain arrays; only one page of cards is in the DOM at a time, built as
 * one innerHTML string. Every string from the data goes through esc() (text, attributes) or url() (links).
 *
 * Hooks for scripts and tests (stable):
 *   Controls, by id (set a value, then dispatch "change" -- or "input" for #search and #threshold):
 *     #search            text: file-name substring, case-insensitive (matches card.name and card.input)
 *     #filter-predicted  select: "" all, "=KEY" one predicted (top-1) class, "*other" the classes folded out of the matrix;
 *                        KEY is the class name, or its index when the card has no name
 *     #filter-truth      select: the same values, for the true class
 *     #filter-correct    select: "" all, "wrong", "correct", "unknown" (no true class)
 *     #filter-blank      select: "" all, "true" blank maps only, "false" not blank
 *     #filter-failed     select: "" all, "true" failed only, "false" ok only
 *     #filter-model, #filter-method   select: "" all or one value (shown when the report has several)
 *     #filter-lowconf    checkbox: the model's top-1 probability below #threshold (number input, default 0.5)
 *   A detector's report (header.detection set) also has, shown only there:
 *     #filter-class      select: "" all, "=KEY" the detections and missed objects of one class (KEY as above)
 *     #filter-match      select: "" all, "found" (every kept detection), "tp", "fp", "fn" (missed objects), "errors"
 *                        (fp and fn), "unknown" (no truth); without truth only "" and "found"
 *     #min-score         number input ("input" event): only detections scoring at least this ("" = any; the cards
 *                        without a score, missed objects and images with nothing found, are left out while it is set)
 *     #sort              select: "id" (run order), "probability" (of the explained class), "margin" (top-1 - top-2),
 *                        "name" (file name), "metric:NAME" for each NAME in header.metrics; a detector's report:
 *                        "score", "energy_in_box", "iou" (and probability and margin only where a classifier's cards are)
 *     #sort-dir          select: "asc" | "desc" (missing values always sort last)
 *     #page-size         select: cards per page, "0" = all on one page (pages of 2,000 beyond that)
 *     #page-first, #page-prev, #page-next, #page-last   buttons; #page-info reads "page 2 of 5"
 *     #thumbs            select: "both" | "overlay" | "original" (which thumbnails the cards show)
 *     #reset             button: clear every filter
 *     #show-all          button inside #notice, present when the page opened on the wrong ones
 *     #match-count       text "12 of 30 cards"; attributes data-matches, data-total, data-page, data-pages
 *   #legend     the overlays' colour scales (header.legend): span.legend-item[data-colormap] each, hidden when none is known
 *   Summary (click to filter the cards; every other filter is cleared first):
 *     #counts     buttons [data-filter="failed"|"blank"|"wrong"|"correct"]
 *     #classes    table; buttons [data-filter="predicted"|"truth"|"wrong"][data-key="=KEY"]; #classes-more shows every class
 *     #confusion  table, rows the true class, columns the predicted one; buttons [data-truth][data-pred] ("=KEY" or "*other")
 *     #pairs      the most confused pairs: buttons [data-truth][data-pred]
 *     #detections a detector's table per class (in place of the matrix): buttons [data-filter="match"]
 *                 [data-match="found"|"tp"|"fp"|"fn"][data-key="=KEY"|""] (its last row, every class: ""); #counts then
 *                 also has buttons [data-filter="match"][data-match="found"|"tp"|"fp"|"fn"]
 *   Cards: #cards > article.card with data-id, data-input, data-class (the explained class: name, or index),
 *     data-probability ("" when none), data-correct ("true"|"false"|""), data-blank, data-ok ("true"|"false"),
 *     data-predicted, data-truth ("" when none). A detector's cards (article.card.card-det) have data-id, data-input,
 *     data-class, data-blank, data-ok, and data-kind ("detection", "missed", "empty": an image with nothing found),
 *     data-match ("tp"|"fp"|"fn"|""), data-score ("" when none).
 *   A segmenter's report (header.segmentation set): its controls, table and cards are segments.js's (see its hooks);
 *     #filter-class is shared with a detector's.
 *   Cards whose map explains a score (header.scores set: prompts, reference images, regression outputs): their controls,
 *     table (#scores, in place of #classes where no card has a predicted class) and cards are scores.js's (see its
 *     hooks); #filter-class is shared, and "score" sorts them. They have no true class in the matrix.
 *   performance marks: "gradcam:start" when app.js starts (data.js parsed), "gradcam:first-render" once the summary and
 *     the first page of cards are in the DOM, "gradcam:first-frame" after the first frame showing them, and
 *     "gradcam:rendered" after every render of the cards (the first included); document.body.dataset.renders counts them.
 */
(function () {
  "use strict";

  var MATRIX_CLASSES = 20; // the confusion matrix shows at most this many classes, the rest fold into "other"
  var PAIRS = 12; // the most confused (true -> predicted) pairs listed under the matrix
  var CLASS_ROWS = 50; // rows of the classes table before its "show all" button
  var MAX_PAGE = 2000; // "all" on one page still pages beyond this many cards (the DOM would be too heavy)
  var SCORE_ONLY = { prompt: true, reference: true, regression: true }; // targets whose maps explain a score, no class
  var OTHER = "*other";

  var $ = function (id) {
    return document.getElementById(id);
  };

  if (window.performance && performance.mark) performance.mark("gradcam:start"); // data.js is loaded and parsed
  var R = window.GRADCAM_REPORT;
  if (!R || !R.cards || !R.header) {
    var le = $("load-error");
    le.textContent = "No report data: data.js is missing or did not load. Rebuild the report with `gradcam report`.";
    le.hidden = false;
    return;
  }
  var H = R.header;
  var cards = R.cards;
  var N = cards.length;
  var metricNames = Array.isArray(H.metrics) ? H.metrics : [];

  // ---- text helpers ----------------------------------------------------------------------------------------
  var ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  // (text from labels and file names may hold bidi controls: the CSS isolates every element that shows such text, and
  // <bdi> each part of a line joined from several, so a right-to-left override ends where its text ends)
  function esc(s) {
    return s == null ? "" : String(s).replace(/[&<>"']/g, function (ch) {
      return ESC[ch];
    });
  }
  // a file path (relative to the report folder, or absolute) as a URL: each segment percent-encoded, so '#', '?',
  // '%' and ':' in file names stay part of the path (and "javascript:..." is only ever a relative path)
  function url(path) {
    if (path == null || path === "") return null;
    var p = String(path).replace(/\\/g, "/");
    var prefix = "";
    var drive = /^([A-Za-z]):\//.exec(p);
    if (drive) {
      prefix = "file:///" + drive[1] + ":/";
      p = p.slice(3);
    }
    return prefix + p.split("/").map(encodeURIComponent).join("/");
  }
  function num(n) {
    return n == null ? "–" : Number(n).toLocaleString("en-US");
  }
  function pct(p) {
    if (p == null || isNaN(p)) return "–";
    var v = p * 100;
    if (v > 0 && v < 0.1) return "<0.1%";
    return v.toFixed(1) + "%";
  }
  function metricText(v) {
    if (v == null || typeof v !== "number" || !isFinite(v)) return "–";
    var a = Math.abs(v);
    return a !== 0 && (a < 0.001 || a >= 1e5) ? v.toExponential(2) : String(Number(v.toPrecision(3)));
  }
  function when(s) {
    if (!s) return "–";
    return String(s).replace("T", " ").replace(/\.\d+/, "").replace(/Z$/, " UTC").replace(/\+00:00$/, " UTC");
  }
  function plural(n, word) {
    return num(n) + " " + word + (n === 1 ? "" : /(s|sh|ch|x)$/.test(word) ? "es" : "s");
  }
  function classKey(name, index) {
    if (name != null && name !== "") return "=" + name;
    if (index != null) return "=" + index;
    return null;
  }
  function keyLabel(key) {
    return key === OTHER ? "other" : key.slice(1);
  }
  function distinct(values) {
    var seen = new Set(), out = [];
    values.forEach(function (v) {
      if (v != null && v !== "" && !seen.has(v)) {
        seen.add(v);
        out.push(v);
      }
    });
    return out;
  }
  var collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });

  // ---- per-card arrays, computed once ------------------------------------------------------------------------
  var nameLC = new Array(N), inputLC = new Array(N), predKey = new Array(N), truthKey = new Array(N), top1 = new Array(N);
  var wrongCards = 0, truthCards = 0;
  for (var i = 0; i < N; i++) {
    var c = cards[i];
    c.name = c.name == null || c.name === "" ? String(c.input == null ? "" : c.input).split(/[\\/]/).pop() : String(c.name);
    if (!c.metrics) c.metrics = {};
    if (!c.topk) c.topk = [];
    nameLC[i] = c.name.toLowerCase();
    inputLC[i] = String(c.input == null ? "" : c.input).toLowerCase();
    predKey[i] = classKey(c.predicted, c.predicted_index);
    var noClass = typeof c.target === "string" && SCORE_ONLY.hasOwnProperty(c.target); // no prediction to judge
    truthKey[i] = noClass || c.true_class == null || c.true_class === "" ? null : "=" + c.true_class;
    top1[i] = c.topk.length && c.topk[0].probability != null ? c.topk[0].probability : c.probability;
    if (truthKey[i] != null) truthCards++;
    if (c.correct === false) wrongCards++;
  }
  var hasTruth = !!H.has_truth || truthCards > 0;

  // a detector's cards: one per detection or missed object (report/detections.py), the table per class in H.detection
  var DET = H.detection && Array.isArray(H.detection.classes) ? H.detection : null;
  // a segmenter's: one per region (report/segments.py), drawn by segments.js, the table per class in H.segmentation
  var SEG = H.segmentation && Array.isArray(H.segmentation.classes) && typeof window.GRADCAM_SEGMENTS === "function"
    ? window.GRADCAM_SEGMENTS({ table: H.segmentation, cards: cards, esc: esc, url: url, pct: pct, num: num, plural: plural, classKey: classKey, keyLabel: keyLabel, thumbHtml: thumbHtml, nameHtml: nameHtml, collator: collator, $: $ })
    : null;
  // a prompt's, a reference's, a regression's: a score, no probability (report/scores.py), drawn by scores.js, the table
  // per prompt in H.scores
  var SCO = H.scores && Array.isArray(H.scores.rows) && typeof window.GRADCAM_SCORES === "function"
    ? window.GRADCAM_SCORES({ table: H.scores, esc: esc, url: url, num: num, plural: plural, classKey: classKey, keyLabel: keyLabel, thumbHtml: thumbHtml, nameHtml: nameHtml, collator: collator, $: $ })
    : null;
  // a video's or a volume's: one card for all its frames or slices (report/videos.py), drawn by videos.js
  var SEQ = typeof window.GRADCAM_SEQUENCES === "function"
    ? window.GRADCAM_SEQUENCES({ esc: esc, url: url, pct: pct, num: num, plural: plural, thumbHtml: thumbHtml, nameHtml: nameHtml })
    : null;
  var isSeq = new Array(N), videoCards = 0, volumeCards = 0;
  var isDet = new Array(N), isSeg = new Array(N), isSco = new Array(N), detKey = new Array(N), detErrors = 0, detJudged = 0;
  for (i = 0; i < N; i++) {
    c = cards[i];
    isDet[i] = c.kind === "detection" || c.kind === "missed" || c.kind === "empty";
    isSeg[i] = !!SEG && c.kind === "segment";
    isSeq[i] = !!SEQ && SEQ.is(c);
    if (c.kind === "video") videoCards++;
    if (c.kind === "volume") volumeCards++;
    isSco[i] = !!SCO && !isDet[i] && !isSeg[i] && !isSeq[i] && SCO.is(c);
    detKey[i] = isDet[i] || isSeg[i] || isSco[i] ? classKey(c.class_name, c.class_index) : null; // #filter-class's key
    if (c.match === "fp" || c.match === "fn") detErrors++;
    if (c.match != null) detJudged++;
  }

  // classes, counted per image (model + input: one image explained for several classes is one prediction)
  var classes = new Map(); // key -> {pred, truth, wrong}
  function cls(key) {
    var e = classes.get(key);
    if (!e) classes.set(key, (e = { key: key, pred: 0, truth: 0, wrong: 0, errT: 0, errP: 0 }));
    return e;
  }
  var cells = new Map(); // truthKey + "\n" + predKey -> images
  var seenImage = new Set();
  for (i = 0; i < N; i++) {
    c = cards[i];
    var imageId = (c.model || "") + "\n" + c.input;
    if (seenImage.has(imageId)) continue;
    seenImage.add(imageId);
    if (predKey[i] != null) cls(predKey[i]).pred++;
    if (truthKey[i] != null) {
      var t = cls(truthKey[i]);
      t.truth++;
      if (c.correct === false) t.wrong++;
      if (predKey[i] != null) {
        var cell = truthKey[i] + "\n" + predKey[i];
        cells.set(cell, (cells.get(cell) || 0) + 1);
        if (truthKey[i] !== predKey[i]) {
          t.errT++;
          cls(predKey[i]).errP++;
        }
      }
    }
  }
  var classList = Array.from(classes.values());
  classList.sort(function (a, b) {
    return b.pred + b.truth - (a.pred + a.truth) || collator.compare(a.key, b.key);
  });

  // the confused pairs (true -> predicted, counted per image), the most frequent first
  var pairs = [];
  cells.forEach(function (n, cellKey) {
    var parts = cellKey.split("\n");
    if (parts[0] !== parts[1]) pairs.push({ t: parts[0], p: parts[1], n: n });
  });
  pairs.sort(function (a, b) {
    return b.n - a.n || collator.compare(a.t, b.t) || collator.compare(a.p, b.p);
  });

  // the matrix's classes: all when few; else both ends of the pairs confused more than once, most frequent first,
  // then the classes with the most errors (then the most images)
  var matrixKeys = [], folded = false, inMatrix = new Set();
  (function () {
    var candidates = classList.filter(function (e) {
      return e.truth > 0 || e.errP > 0;
    });
    if (candidates.length <= MATRIX_CLASSES) {
      candidates.forEach(function (e) {
        inMatrix.add(e.key);
      });
    } else {
      folded = true;
      for (var k = 0; k < pairs.length && pairs[k].n > 1 && inMatrix.size < MATRIX_CLASSES; k++) {
        var need = (inMatrix.has(pairs[k].t) ? 0 : 1) + (inMatrix.has(pairs[k].p) ? 0 : 1);
        if (inMatrix.size + need > MATRIX_CLASSES) continue;
        inMatrix.add(pairs[k].t);
        inMatrix.add(pairs[k].p);
      }
      candidates.sort(function (a, b) {
        return b.errT + b.errP - (a.errT + a.errP) || b.truth + b.pred - (a.truth + a.pred) || collator.compare(a.key, b.key);
      });
      for (k = 0; k < candidates.length && inMatrix.size < MATRIX_CLASSES; k++) inMatrix.add(candidates[k].key);
    }
    matrixKeys = Array.from(inMatrix).sort(collator.compare);
  })();

  // ---- the header and the summary ----------------------------------------------------------------------------
  var runs = Array.isArray(H.runs) ? H.runs : [];
  var models = H.models && H.models.length ? H.models : distinct(cards.map(function (c) { return c.model; }));
  var methods = H.methods && H.methods.length ? H.methods : distinct(cards.map(function (c) { return c.method; }));
  var layers = H.layers && H.layers.length ? H.layers : distinct([].concat.apply([], cards.map(function (c) { return c.layers || []; })));
  var counts = H.counts || {};
  function count(name, fallback) {
    return counts[name] != null ? counts[name] : fallback;
  }

  function renderHeader() {
    var parts = [];
    if (models.length) parts.push(models.join(", "));
    if (methods.length) parts.push(methods.join(", "));
    if (layers.length) parts.push(layers.join(", "));
    var line = parts.map(function (p) { return "<b>" + esc(p) + "</b>"; }).join(" · ");
    line += ' <span class="sep">—</span> ' + esc(plural(N, "card")) + " · generated " + esc(when(H.generated));
    if (H.version) line += " · gradcam " + esc(H.version);
    $("subtitle").innerHTML = line;
    document.title = "Grad-CAM report — " + (models.join(", ") || "no model") + " (" + plural(N, "card") + ")";

    $("runs-plural").textContent = runs.length === 1 ? "" : "s";
    var h = "";
    if (!runs.length) h = '<p class="muted">No run recorded.</p>';
    runs.forEach(function (r, k) {
      h += '<dl class="run">';
      if (runs.length > 1) h += '<dt class="run-n">run ' + (k + 1) + "</dt><dd>" + (r.interrupted ? '<span class="badge badge-warn">interrupted</span>' : "") + "</dd>";
      h += "<dt>model</dt><dd><b>" + esc(r.model) + "</b>" + (r.pretrained ? ' <span class="muted">pretrained</span>' : "") + "</dd>";
      h += "<dt>weights</dt><dd>" + (r.weights ? "<code>" + esc(r.weights) + "</code>" : '<span class="muted">' + (r.pretrained ? "the library's pretrained weights" : r.pretrained === false ? "random weights" : "the weights your code builds") + "</span>") + "</dd>";
      if (r.weights_sha256) h += '<dt>SHA-256</dt><dd><code class="hash">' + esc(r.weights_sha256) + "</code></dd>";
      h += "<dt>method</dt><dd>" + esc(r.method) + "</dd>";
      h += "<dt>layers</dt><dd>" + esc((r.layers || []).join(", ")) + "</dd>";
      if (r.colormap) h += "<dt>colours</dt><dd>" + esc(r.colormap) + (r.norm === "none" ? ' <span class="muted">(--norm none: raw values in the .npy files)</span>' : "") + "</dd>";
      if (r.device) h += "<dt>device</dt><dd>" + esc(r.device) + "</dd>";
      if (r.shard) h += "<dt>shard</dt><dd>" + esc(r.shard) + "</dd>";
      h += "<dt>dates</dt><dd>" + esc(when(r.started)) + " → " + esc(r.finished ? when(r.finished) : "not finished") + (r.interrupted && runs.length === 1 ? ' <span class="badge badge-warn">interrupted</span>' : "") + "</dd>";
      if (r.version) h += "<dt>gradcam</dt><dd>" + esc(r.version) + "</dd>";
      h += "<dt>command</dt><dd>" + (r.command ? '<code class="command">' + esc(r.command) + "</code>" : '<span class="muted">unknown</span>') + "</dd>";
      h += "</dl>";
    });
    h += '<p class="muted small">report generated ' + esc(when(H.generated)) + (H.version ? " by gradcam " + esc(H.version) : "") + "</p>";
    $("runs").innerHTML = h;

    var failed = count("failed", cards.filter(function (c) { return !c.ok; }).length);
    var blank = count("blank", cards.filter(function (c) { return c.blank; }).length);
    var correct = count("correct", cards.filter(function (c) { return c.correct === true; }).length);
    var wrong = count("wrong", wrongCards);
    var withTruth = count("with_truth", truthCards);
    function tile(label, value, filter, extra) {
      var inner = '<span class="tile-v">' + esc(value) + '</span><span class="tile-k">' + esc(label) + "</span>";
      return filter
        ? '<button type="button" class="tile' + (extra || "") + '" data-filter="' + filter + '" title="show these cards">' + inner + "</button>"
        : '<span class="tile' + (extra || "") + '">' + inner + "</span>";
    }
    var ct = tile("images", num(count("images", seenImage.size))) + tile("cards", num(count("cards", N)));
    ct += tile("failed", num(failed), "failed", failed ? " tile-bad" : "") + tile("blank", num(blank), "blank", blank ? " tile-warn" : "");
    if (counts.skipped != null) ct += tile("skipped", num(counts.skipped));
    if (videoCards) ct += tile("videos", num(videoCards)) + tile("frames explained", num(count("frames", 0)));
    if (volumeCards) ct += tile("volumes", num(volumeCards)) + tile("slices explained", num(count("slices", 0)));
    if (hasTruth) {
      ct += tile("with true class", num(withTruth)) + tile("correct", num(correct), "correct", " tile-good") + tile("wrong", num(wrong), "wrong", wrong ? " tile-bad" : "");
      if (correct + wrong > 0) ct += tile("accuracy", ((100 * correct) / (correct + wrong)).toFixed(1) + "%");
    }
    if (DET) ct += detectionTiles(DET.all || {}, !!DET.has_truth);
    if (SEG) ct += SEG.tiles();
    $("counts").innerHTML = '<div class="tiles">' + ct + "</div>";
  }

  // a detector's counts: its detections, and where the truth was given how many are right, wrong and missed
  function detectionTiles(all, judged) {
    function tile(label, n, match, extra) {
      var inner = '<span class="tile-v">' + esc(num(n || 0)) + '</span><span class="tile-k">' + esc(label) + "</span>";
      return '<button type="button" class="tile' + (n ? extra : "") + '" data-filter="match" data-match="' + match + '" title="show these cards">' + inner + "</button>";
    }
    function ratio(label, v) {
      return '<span class="tile"><span class="tile-v">' + esc(pct(v)) + '</span><span class="tile-k">' + esc(label) + "</span></span>";
    }
    var h = tile("detections", all.detections, "found", "");
    if (judged) h += tile("true positives", all.tp, "tp", " tile-good") + tile("false positives", all.fp, "fp", " tile-bad") + tile("missed", all.fn, "fn", " tile-bad") + ratio("precision", all.precision) + ratio("recall", all.recall);
    return h + ratio("energy in box", all.energy_in_box);
  }

  // the colour legend: each colour scale the overlays use, low (0) to high (1), and what the numbers mean
  function renderLegend() {
    var scales = Array.isArray(H.legend) ? H.legend : [];
    var h = "";
    scales.forEach(function (g) {
      var stops = (Array.isArray(g.stops) ? g.stops : []).filter(function (c) { return /^#[0-9a-fA-F]{6}$/.test(c); });
      if (stops.length < 2) return;
      var note = g.norm === "none"
        ? "each picture scales its map from its lowest value (0) to its highest (1); the .npy files hold the raw values (--norm none)"
        : "each map scaled to its own range: 0 is its lowest value, 1 its highest";
      var who = Array.isArray(g.runs) && g.runs.length ? (g.runs.length === 1 ? "run " : "runs ") + esc(g.runs.join(", ")) + " " : "";
      h += '<span class="legend-item" data-colormap="' + esc(g.colormap) + '" title="' + esc(note) + '">';
      h += '<span class="k">' + who + "colours</span> ";
      h += '<span class="legend-end">low 0</span><span class="legend-bar" style="background:linear-gradient(to right,' + stops.join(",") + ')"></span><span class="legend-end">1 high</span>';
      h += ' <span class="legend-name">' + esc(g.colormap) + '</span> <span class="legend-note">' + esc(note) + "</span></span>";
    });
    $("legend").innerHTML = h;
    $("legend").hidden = !h;
  }

  // a video (volume) counts once, by the top-1 most of its frames (slices) have, never once per frame
  var perSequence = videoCards || volumeCards ? " (a " + (videoCards && volumeCards ? "video or volume" : videoCards ? "video" : "volume") + " once: the top-1 most of its " + (videoCards && volumeCards ? "frames or slices" : videoCards ? "frames" : "slices") + " have)" : "";

  // the classes table: the most wrong first (then the most images); a long list shows its first CLASS_ROWS rows
  var tableList = classList.slice().sort(function (a, b) {
    return b.wrong - a.wrong || b.pred + b.truth - (a.pred + a.truth) || collator.compare(a.key, b.key);
  });
  function renderClasses(all) {
    if (!tableList.length) {
      $("classes").innerHTML = '<p class="muted">No prediction.</p>';
      return;
    }
    var rows = all ? tableList : tableList.slice(0, CLASS_ROWS);
    var h = '<table class="classes"><thead><tr><th class="l">class</th><th title="images the model predicted as this class">predicted</th>';
    if (hasTruth) h += '<th title="images whose true class is this one">true</th><th title="images of this true class predicted as another">wrong</th>';
    h += "</tr></thead><tbody>";
    rows.forEach(function (e) {
      var k = esc(e.key);
      h += '<tr><td class="l" title="' + esc(keyLabel(e.key)) + '">' + esc(keyLabel(e.key)) + "</td>";
      h += "<td>" + (e.pred ? '<button type="button" data-filter="predicted" data-key="' + k + '">' + num(e.pred) + "</button>" : '<span class="zero">0</span>') + "</td>";
      if (hasTruth) {
        h += "<td>" + (e.truth ? '<button type="button" data-filter="truth" data-key="' + k + '">' + num(e.truth) + "</button>" : '<span class="zero">0</span>') + "</td>";
        h += "<td>" + (e.wrong ? '<button type="button" class="bad" data-filter="wrong" data-key="' + k + '">' + num(e.wrong) + "</button>" : '<span class="zero">0</span>') + "</td>";
      }
      h += "</tr>";
    });
    h += "</tbody></table>";
    if (rows.length < tableList.length) h += '<p><button type="button" id="classes-more" class="more">show all ' + plural(tableList.length, "class") + "</button></p>";
    var order = hasTruth ? "the most wrong first" : "the most predicted first";
    $("classes").innerHTML = '<p class="muted small">' + plural(tableList.length, "class") + ", counted per image" + perSequence + ", " + order + "; click a number to filter.</p>" + h;
  }

  function renderConfusion() {
    if (!hasTruth || !matrixKeys.length) return;
    $("panel-confusion").hidden = false;
    var rows = matrixKeys.slice(), cols = matrixKeys.slice();
    function fold(key) {
      return inMatrix.has(key) ? key : OTHER;
    }
    var grid = new Map(), rowHas = new Set(), colHas = new Set();
    cells.forEach(function (n, cellKey) {
      var parts = cellKey.split("\n");
      var r = fold(parts[0]), q = fold(parts[1]);
      var g = r + "\n" + q;
      grid.set(g, (grid.get(g) || 0) + n);
      rowHas.add(r);
      colHas.add(q);
    });
    // three colour scales: right (the diagonal), wrong, and "other" (folded classes, right and wrong mixed)
    var max = { diag: 1, off: 1, other: 1 };
    function kind(r, q) {
      return r === OTHER || q === OTHER ? "other" : r === q ? "diag" : "off";
    }
    grid.forEach(function (n, g) {
      var parts = g.split("\n"), k = kind(parts[0], parts[1]);
      if (n > max[k]) max[k] = n;
    });
    var RGB = { diag: "46,140,87", off: "205,55,55", other: "110,120,135" };
    if (rowHas.has(OTHER)) rows.push(OTHER);
    if (colHas.has(OTHER)) cols.push(OTHER);
    var h = '<div class="matrix-wrap"><table class="matrix"><thead><tr><th class="corner">true \\ predicted</th>';
    cols.forEach(function (q) {
      h += '<th class="col" title="predicted ' + esc(keyLabel(q)) + '"><span>' + esc(keyLabel(q)) + "</span></th>";
    });
    h += "</tr></thead><tbody>";
    rows.forEach(function (r) {
      h += '<tr><th class="row" title="true ' + esc(keyLabel(r)) + '">' + esc(keyLabel(r)) + "</th>";
      cols.forEach(function (q) {
        var n = grid.get(r + "\n" + q) || 0;
        if (!n) {
          h += "<td></td>";
          return;
        }
        var k = kind(r, q);
        var alpha = (0.14 + (0.66 * Math.sqrt(n)) / Math.sqrt(max[k])).toFixed(2);
        h += '<td><button type="button" class="' + k + '" style="background:rgba(' + RGB[k] + "," + alpha + ')" data-truth="' + esc(r) + '" data-pred="' + esc(q) + '" title="true ' + esc(keyLabel(r)) + ", predicted " + esc(keyLabel(q)) + ": " + plural(n, "image") + '">' + num(n) + "</button></td>";
      });
      h += "</tr>";
    });
    h += "</tbody></table></div>";
    var note = "Rows: the true class; columns: the model's top-1; counted per image" + perSequence + ".";
    if (folded) note += " " + matrixKeys.length + " classes: those of the most confused pairs, then those with the most errors; the others are folded into “other”.";
    $("confusion").innerHTML = '<p class="muted small">' + esc(note) + "</p>" + h;

    var ph = "";
    if (pairs.length) {
      ph = '<p class="pairs-title">Most confused</p><ol class="pairs">';
      pairs.slice(0, PAIRS).forEach(function (e) {
        ph += '<li><button type="button" data-truth="' + esc(e.t) + '" data-pred="' + esc(e.p) + '"><span class="pt">' + esc(keyLabel(e.t)) + '</span> <span class="arrow">→</span> <span class="pp">' + esc(keyLabel(e.p)) + '</span> <span class="pn">' + num(e.n) + "</span></button></li>";
      });
      ph += "</ol>";
    } else {
      ph = '<p class="muted small">No confusion: every image with a true class is predicted right.</p>';
    }
    $("pairs").innerHTML = ph;
  }

  // a detector's table per class, in place of the confusion matrix: what was found, right, wrong and missed, and how much
  // of each detection's map lies inside its box; a click on a number shows those cards
  function renderDetections() {
    if (!DET) return;
    $("panel-detections").hidden = false;
    var judged = !!DET.has_truth;
    function cell(n, match, key, bad) {
      if (!n) return '<td><span class="zero">0</span></td>';
      return '<td><button type="button"' + (bad ? ' class="bad"' : "") + ' data-filter="match" data-match="' + match + '" data-key="' + esc(key) + '">' + num(n) + "</button></td>";
    }
    function row(e, label, key) {
      var h = '<td class="l" title="' + esc(label) + '">' + esc(label) + "</td>" + cell(e.detections, "found", key);
      if (judged) h += cell(e.tp, "tp", key) + cell(e.fp, "fp", key, true) + cell(e.fn, "fn", key, true) + "<td>" + pct(e.precision) + "</td><td>" + pct(e.recall) + "</td>";
      return h + "<td>" + pct(e.energy_in_box) + "</td>";
    }
    var h = '<table class="classes det-classes"><thead><tr><th class="l">class</th><th title="the detections the model kept">detections</th>';
    if (judged) h += '<th title="true positives: detections that match a true box of their class">tp</th><th title="false positives: detections that match no true box of their class">fp</th><th title="false negatives: true objects no detection matched">missed</th><th title="tp / (tp + fp)">precision</th><th title="tp / (tp + missed)">recall</th>';
    h += '<th title="the mean share of a detection\'s map inside its own box">energy in box</th></tr></thead><tbody>';
    DET.classes.forEach(function (e) {
      var key = classKey(e.class_name, e.class_index) || "";
      h += "<tr>" + row(e, keyLabel(key || "=?"), key) + "</tr>";
    });
    h += '</tbody><tfoot><tr class="all">' + row(DET.all || {}, "all classes", "") + "</tr></tfoot></table>";
    var note = plural(DET.classes.length, "class") + (judged ? ", the most errors first" : ", the most detections first") + "; energy in box: the mean share of a detection's map inside its box; click a number to filter.";
    $("detections").innerHTML = '<p class="muted small">' + esc(note) + "</p>" + h;
  }

  function fillSelects() {
    function options(counter, label) {
      var keys = classList.filter(function (e) { return e[counter] > 0; }).map(function (e) { return e; });
      keys.sort(function (a, b) { return collator.compare(a.key, b.key); });
      var h = '<option value="">' + esc(label) + "</option>";
      keys.forEach(function (e) {
        h += '<option value="' + esc(e.key) + '">' + esc(keyLabel(e.key)) + " (" + num(e[counter]) + ")</option>";
      });
      if (folded) h += '<option value="' + OTHER + '">other (outside the matrix)</option>';
      return h;
    }
    $("filter-predicted").innerHTML = options("pred", "all classes");
    $("filter-truth").innerHTML = options("truth", "all classes");
    if (!hasTruth) {
      $("ctl-truth").hidden = true;
      $("ctl-correct").hidden = true;
    }
    function simple(id, ctl, values) {
      if (values.length < 2) return;
      $(ctl).hidden = false;
      $(id).innerHTML = '<option value="">all</option>' + values.map(function (v) { return '<option value="' + esc(v) + '">' + esc(v) + "</option>"; }).join("");
    }
    simple("filter-model", "ctl-model", models);
    simple("filter-method", "ctl-method", methods);
    if (DET) fillDetectionSelects();
    if (SEG) SEG.fillControls();
    if (SCO) SCO.fillControls();
    var own = DET || SEG || SCO; // cards of their own kind, a table of their own
    if (own && !classList.length) $("ctl-predicted").hidden = $("ctl-low").hidden = $("panel-classes").hidden = true;
    var so = '<option value="id">run order</option>';
    if (!own || classList.length) so += '<option value="probability">probability</option><option value="margin">margin (top-1 − top-2)</option>';
    if (DET || SCO) so += '<option value="score">score</option>';
    if (DET) so += '<option value="energy_in_box">energy in box</option><option value="iou">IoU</option>';
    if (SEG) so += SEG.sorts();
    so += '<option value="name">file name</option>';
    metricNames.forEach(function (m) {
      so += '<option value="metric:' + esc(m) + '">' + esc(m) + "</option>";
    });
    $("sort").innerHTML = so;
    $("sort").value = own ? "id" : "probability"; // a detector's, a segmenter's: each image's objects together, as found
    $("sort-dir").value = own ? "asc" : "desc"; // (a prompt's: each image's prompts together)
  }

  // a detector's controls: its classes, what matched (with truth), a minimum score; a classifier's shown only beside its cards
  function fillDetectionSelects() {
    $("ctl-class").hidden = $("ctl-match").hidden = $("ctl-score").hidden = false;
    var rows = DET.classes.slice().sort(function (a, b) {
      return collator.compare(keyLabel(classKey(a.class_name, a.class_index) || "=?"), keyLabel(classKey(b.class_name, b.class_index) || "=?"));
    });
    var h = '<option value="">all classes</option>';
    rows.forEach(function (e) {
      var key = classKey(e.class_name, e.class_index);
      if (key) h += '<option value="' + esc(key) + '">' + esc(keyLabel(key)) + " (" + num(e.detections + e.fn) + ")</option>";
    });
    $("filter-class").innerHTML = h;
    if (!DET.has_truth) $("filter-match").innerHTML = '<option value="">all</option><option value="found">detections</option>';
    else $("filter-match").querySelector('option[value=""]').insertAdjacentHTML("afterend", '<option value="found">detections (tp and fp)</option>');
  }

  // ---- sorting and filtering ---------------------------------------------------------------------------------
  var orders = {}; // "key|dir" -> array of card positions, missing values last
  function sortedOrder(key, dir) {
    var cacheKey = key + "|" + dir;
    if (orders[cacheKey]) return orders[cacheKey];
    var sign = dir === "asc" ? 1 : -1;
    var have = [], missing = [], j, out;
    if (key === "id") {
      out = new Array(N);
      for (j = 0; j < N; j++) out[j] = dir === "asc" ? j : N - 1 - j;
    } else if (key === "name") {
      for (j = 0; j < N; j++) have.push(j);
      have.sort(function (a, b) {
        return sign * (collator.compare(cards[a].name, cards[b].name) || collator.compare(String(cards[a].input), String(cards[b].input))) || a - b;
      });
      out = have;
    } else {
      var values = new Array(N), metric = key.indexOf("metric:") === 0 ? key.slice(7) : null;
      for (j = 0; j < N; j++) {
        var v = metric ? cards[j].metrics[metric] : cards[j][key];
        values[j] = typeof v === "number" && isFinite(v) ? v : null;
        (values[j] === null ? missing : have).push(j);
      }
      have.sort(function (a, b) {
        return sign * (values[a] - values[b]) || a - b;
      });
      out = have.concat(missing);
    }
    orders[cacheKey] = out;
    return out;
  }

  function readFilters() {
    var threshold = parseFloat($("threshold").value);
    return {
      search: $("search").value.trim().toLowerCase(),
      predicted: $("filter-predicted").value,
      truth: $("filter-truth").value,
      correct: $("filter-correct").value,
      blank: $("filter-blank").value,
      failed: $("filter-failed").value,
      model: $("filter-model").value,
      method: $("filter-method").value,
      low: $("filter-lowconf").checked,
      threshold: isNaN(threshold) ? 0.5 : threshold,
      cls: $("filter-class").value,
      match: $("filter-match").value,
      minScore: $("min-score").value.trim() === "" || isNaN(parseFloat($("min-score").value)) ? null : parseFloat($("min-score").value),
      region: $("filter-region").value,
      maxIou: $("max-iou").value.trim() === "" || isNaN(parseFloat($("max-iou").value)) ? null : parseFloat($("max-iou").value),
      best: $("filter-best").value,
    };
  }

  function classMatches(want, key) {
    if (!want) return true;
    if (key == null) return false;
    return want === OTHER ? !inMatrix.has(key) : key === want;
  }

  function matchIs(want, c) {
    if (want === "errors") return c.match === "fp" || c.match === "fn";
    if (want === "found") return c.kind === "detection";
    if (want === "unknown") return c.match == null;
    return c.match === want;
  }

  function matching(f, order) {
    var out = [];
    for (var k = 0; k < order.length; k++) {
      var j = order[k], c = cards[j];
      if (f.search && nameLC[j].indexOf(f.search) < 0 && inputLC[j].indexOf(f.search) < 0) continue;
      if (f.predicted && !classMatches(f.predicted, predKey[j])) continue;
      if (f.truth && !classMatches(f.truth, truthKey[j])) continue;
      if (f.correct === "wrong" && c.correct !== false) continue;
      if (f.correct === "correct" && c.correct !== true) continue;
      if (f.correct === "unknown" && c.correct != null) continue;
      if (f.blank && String(!!c.blank) !== f.blank) continue;
      if (f.failed && String(!c.ok) !== f.failed) continue;
      if (f.model && c.model !== f.model) continue;
      if (f.method && c.method !== f.method) continue;
      if (f.low && !(top1[j] != null && top1[j] < f.threshold)) continue;
      if (f.cls && detKey[j] !== f.cls) continue;
      if (f.match && !matchIs(f.match, c)) continue;
      if (f.minScore != null && !(typeof c.score === "number" && c.score >= f.minScore)) continue;
      if ((f.region || f.maxIou != null) && !(isSeg[j] && SEG.keep(f, c))) continue;
      if (f.best && !(isSco[j] && SCO.keep(f, c))) continue;
      out.push(j);
    }
    return out;
  }

  // ---- cards -------------------------------------------------------------------------------------------------
  function thumbHtml(src, full, kind, c) {
    var w = c.thumb_w > 0 ? Math.round(c.thumb_w) : 256, h = c.thumb_h > 0 ? Math.round(c.thumb_h) : 192;
    var s = url(src), f = url(full);
    var cls = "thumb thumb-" + kind;
    if (!s) return '<span class="' + cls + ' thumb-missing" style="aspect-ratio:' + w + "/" + h + '">' + (kind !== "overlay" ? "no image" : c.replaced ? "replaced by a later run" : "no overlay") + "</span>";
    var img = '<img src="' + esc(s) + '" loading="lazy" decoding="async" width="' + w + '" height="' + h + '" alt="' + kind + '">';
    if (!f) return '<span class="' + cls + '">' + img + "</span>";
    return '<a class="' + cls + '" href="' + esc(f) + '" target="_blank" rel="noopener" title="open the full-size ' + kind + '">' + img + "</a>";
  }

  function nameHtml(c) {
    var input = String(c.input == null ? "" : c.input), slash = Math.max(input.lastIndexOf("/"), input.lastIndexOf("\\"));
    var h = '<div class="name" title="' + esc(input) + '">' + esc(c.name) + "</div>";
    if (slash > 0) h += '<div class="path" title="' + esc(input) + '">' + esc(input.slice(0, slash + 1)) + "</div>";
    return h;
  }

  function cardHtml(j, f) {
    if (isDet[j]) return detectionCardHtml(j);
    if (isSeg[j]) return SEG.cardHtml(cards[j], j);
    if (isSco[j]) return SCO.cardHtml(cards[j], j);
    if (isSeq[j]) return SEQ.cardHtml(cards[j], j);
    var c = cards[j];
    var explained = c.class_name != null && c.class_name !== "" ? String(c.class_name) : c.class_index != null ? String(c.class_index) : "";
    var correct = c.correct === true ? "true" : c.correct === false ? "false" : "";
    var low = c.ok && top1[j] != null && top1[j] < f.threshold;
    var h = '<article class="card' + (c.ok ? "" : " is-failed") + (c.correct === false ? " is-wrong" : "") + '" data-id="' + esc(c.id != null ? c.id : j) + '" data-input="' + esc(c.input) + '" data-class="' + esc(explained) + '" data-probability="' + (typeof c.probability === "number" ? c.probability : "") + '" data-correct="' + correct + '" data-blank="' + (c.blank ? "true" : "false") + '" data-ok="' + (c.ok ? "true" : "false") + '" data-predicted="' + esc(predKey[j] ? predKey[j].slice(1) : "") + '" data-truth="' + esc(c.true_class == null ? "" : c.true_class) + '">';
    h += '<div class="thumbs">' + thumbHtml(c.thumb, c.original, "original", c) + thumbHtml(c.overlay_thumb, c.overlay, "overlay", c) + "</div>";
    h += '<div class="body">' + nameHtml(c);
    var b = "";
    if (!c.ok) b += '<span class="badge badge-failed">failed</span>';
    if (c.correct === true) b += '<span class="badge badge-good">correct</span>';
    if (c.correct === false) b += '<span class="badge badge-bad">wrong</span>';
    if (c.blank) b += '<span class="badge badge-warn" title="the heat map is blank: no evidence for this class at this layer">blank</span>';
    if (low) b += '<span class="badge badge-low" title="top-1 probability below ' + esc(f.threshold) + '">low ' + pct(top1[j]) + "</span>";
    if (b) h += '<div class="badges">' + b + "</div>";
    if (!c.ok) h += '<p class="error">' + esc(c.error || "failed, no message") + "</p>";
    if (explained !== "") {
      h += '<div class="line"><span class="k">explained</span> <b class="cls">' + esc(explained) + "</b>";
      if (c.class_name && c.class_index != null) h += ' <span class="muted">#' + esc(c.class_index) + "</span>";
      if (c.probability != null) h += ' <span class="p">' + pct(c.probability) + "</span>";
      h += "</div>";
    }
    if (c.true_class != null && c.true_class !== "") h += '<div class="line"><span class="k">true</span> <span class="tv' + (c.correct === false ? " bad" : c.correct === true ? " good" : "") + '">' + esc(c.true_class) + "</span></div>";
    if (c.topk.length) {
      h += '<ol class="topk">';
      for (var k = 0; k < c.topk.length; k++) {
        var e = c.topk[k], en = e.name != null && e.name !== "" ? String(e.name) : String(e.index);
        var isExplained = (c.class_index != null && e.index === c.class_index) || (c.class_index == null && en === explained);
        var isTrue = c.true_class != null && en === String(c.true_class);
        var p = typeof e.probability === "number" ? e.probability : 0;
        h += '<li class="' + (isExplained ? "is-explained" : "") + (isTrue ? " is-true" : "") + '"><span class="bar" style="width:calc((100% - 48px) * ' + Math.max(0, Math.min(1, p)).toFixed(3) + ')"></span><span class="tn">' + esc(en) + (isTrue ? ' <span class="tick" title="the true class">✓</span>' : "") + '</span><span class="tp">' + pct(e.probability) + "</span></li>";
      }
      h += "</ol>";
    }
    var mk = Object.keys(c.metrics);
    if (mk.length) {
      h += '<div class="metrics">' + mk.map(function (m) {
        return '<span><span class="k">' + esc(m) + "</span> " + esc(metricText(c.metrics[m])) + "</span>";
      }).join("") + "</div>";
    }
    var meta = [c.model, c.method, (c.layers || []).join(", ")].filter(function (x) { return x; });
    if (c.ok && c.probability != null && c.margin != null) meta.push("margin " + pct(c.margin));
    if (meta.length) h += '<div class="meta">' + meta.map(function (m) { return "<bdi>" + esc(m) + "</bdi>"; }).join(" · ") + "</div>";
    var links = [];
    if (url(c.original)) links.push('<a href="' + esc(url(c.original)) + '" target="_blank" rel="noopener">original</a>');
    if (url(c.overlay)) links.push('<a href="' + esc(url(c.overlay)) + '" target="_blank" rel="noopener">overlay</a>');
    if (url(c.npy)) links.push('<a class="npy" href="' + esc(url(c.npy)) + '">.npy</a>');
    if (links.length) h += '<div class="links">' + links.join("") + "</div>";
    h += "</div></article>";
    return h;
  }

  // a detector's card: its box cut from the photo and from its map, what was found (or missed), how its map sits there
  function detectionCardHtml(j) {
    var c = cards[j];
    var cls = c.class_name != null && c.class_name !== "" ? String(c.class_name) : c.class_index != null ? String(c.class_index) : "";
    var wrong = c.match === "fp" || c.match === "fn";
    var h = '<article class="card card-det' + (wrong ? " is-wrong" : "") + '" data-id="' + esc(c.id != null ? c.id : j) + '" data-input="' + esc(c.input) + '" data-kind="' + esc(c.kind) + '" data-class="' + esc(cls) + '" data-score="' + (typeof c.score === "number" ? c.score : "") + '" data-match="' + esc(c.match || "") + '" data-blank="' + (c.blank ? "true" : "false") + '" data-ok="true">';
    h += '<div class="thumbs">' + thumbHtml(c.thumb, c.original, "original", c) + thumbHtml(c.overlay_thumb, c.overlay, "overlay", c) + "</div>";
    h += '<div class="body">' + nameHtml(c);
    var b = "";
    if (c.match === "tp") b += '<span class="badge badge-good" title="a true positive: it matches a true box of its class">tp</span>';
    if (c.match === "fp") b += '<span class="badge badge-bad" title="a false positive: it matches no true box of its class">fp</span>';
    if (c.match === "fn") b += '<span class="badge badge-bad" title="missed: no kept detection matches this true object">fn</span>';
    if (c.kind === "empty") b += '<span class="badge badge-low" title="the detector kept no box in this image">nothing found</span>';
    if (c.blank) b += '<span class="badge badge-warn" title="the heat map is blank: no evidence for this object at this layer">blank</span>';
    if (b) h += '<div class="badges">' + b + "</div>";
    if (c.kind !== "empty") h += detectionLines(c, cls);
    var meta = [c.model, c.method, (c.layers || []).join(", ")].filter(function (x) { return x; });
    if (c.rank != null && c.kind !== "empty") meta.push((c.kind === "missed" ? "missed " : "detection ") + c.rank);
    if (meta.length) h += '<div class="meta">' + meta.map(function (m) { return "<bdi>" + esc(m) + "</bdi>"; }).join(" · ") + "</div>";
    var links = [];
    if (url(c.original)) links.push('<a href="' + esc(url(c.original)) + '" target="_blank" rel="noopener">original</a>');
    if (url(c.overlay)) links.push('<a href="' + esc(url(c.overlay)) + '" target="_blank" rel="noopener">' + (c.own_overlay ? "its map" : "picture") + "</a>");
    if (url(c.picture)) links.push('<a href="' + esc(url(c.picture)) + '" target="_blank" rel="noopener">every box</a>');
    if (links.length) h += '<div class="links">' + links.join("") + "</div>";
    return h + "</div></article>";
  }

  function detectionLines(c, cls) {
    var score = function (v) { return typeof v === "number" ? v.toFixed(2) : "–"; };
    var h = '<div class="line"><span class="k">' + (c.kind === "missed" ? "missed" : "found") + '</span> <b class="cls">' + esc(cls) + "</b>";
    if (c.class_name && c.class_index != null) h += ' <span class="muted">#' + esc(c.class_index) + "</span>";
    if (c.kind === "detection") h += ' <span class="p">score ' + score(c.score) + "</span>";
    h += "</div>";
    if (c.kind === "missed") {
      h += '<div class="line"><span class="k">best candidate</span> ' + (c.candidate_score != null ? "score " + score(c.candidate_score) + (c.candidate_iou != null ? ", IoU " + score(c.candidate_iou) : "") : '<span class="muted">none of its class</span>') + "</div>";
    } else if (c.iou != null) {
      h += '<div class="line"><span class="k">' + (c.match === "tp" ? "IoU with its true box" : "best IoU of its class") + "</span> " + score(c.iou) + "</div>";
    }
    var m = [];
    if (typeof c.energy_in_box === "number") m.push('<span title="the share of its map\'s energy inside its box"><span class="k">energy in box</span> ' + pct(c.energy_in_box) + "</span>");
    if (c.peak_in_box != null) m.push('<span title="whether its map\'s peak falls inside its box"><span class="k">peak in box</span> ' + (c.peak_in_box ? "yes" : '<span class="bad">no</span>') + "</span>");
    if (m.length) h += '<div class="metrics">' + m.join("") + "</div>";
    return h;
  }

  // ---- state and rendering -----------------------------------------------------------------------------------
  var matches = [], page = 0, renders = 0, filters = readFilters(), openedOn = null;
  var cardsEl = $("cards");

  function pageSize() {
    var n = parseInt($("page-size").value, 10);
    return n > 0 ? n : Math.max(1, Math.min(MAX_PAGE, matches.length));
  }
  function pageCount() {
    return Math.max(1, Math.ceil(matches.length / pageSize()));
  }

  function update() {
    filters = readFilters();
    matches = matching(filters, sortedOrder($("sort").value, $("sort-dir").value));
    page = 0;
    if (openedOn && $(openedOn[0]).value !== openedOn[1]) {
      openedOn = null;
      $("notice").hidden = true;
    }
    render();
  }

  function render() {
    var size = pageSize(), pages = pageCount();
    if (page >= pages) page = pages - 1;
    if (page < 0) page = 0;
    var start = page * size, end = Math.min(matches.length, start + size);
    var parts = new Array(end - start);
    for (var k = start; k < end; k++) parts[k - start] = cardHtml(matches[k], filters);
    cardsEl.innerHTML = parts.join("");
    $("empty").hidden = matches.length > 0;

    var mc = $("match-count");
    mc.textContent = (matches.length === N ? "all " : num(matches.length) + " of ") + plural(N, "card") + (matches.length > size ? " · showing " + num(start + 1) + "–" + num(end) : "");
    mc.dataset.matches = matches.length;
    mc.dataset.total = N;
    mc.dataset.page = page + 1;
    mc.dataset.pages = pages;
    var info = "page " + num(page + 1) + " of " + num(pages);
    document.querySelectorAll(".page-info").forEach(function (el) {
      el.textContent = info;
    });
    document.querySelectorAll("[data-page]").forEach(function (el) {
      var a = el.getAttribute("data-page");
      el.disabled = a === "first" || a === "prev" ? page === 0 : page >= pages - 1;
    });
    $("pager-bottom").hidden = pages < 2;

    renders++;
    document.body.dataset.renders = renders;
    if (window.performance && performance.mark) {
      if (renders === 1) {
        performance.mark("gradcam:first-render");
        requestAnimationFrame(function () {
          setTimeout(function () {
            performance.mark("gradcam:first-frame"); // the first frame with the cards was drawn
          }, 0);
        });
      }
      performance.mark("gradcam:rendered");
    }
  }

  function goTo(where) {
    var pages = pageCount(), before = page;
    if (where === "first") page = 0;
    else if (where === "prev") page = Math.max(0, page - 1);
    else if (where === "next") page = Math.min(pages - 1, page + 1);
    else if (where === "last") page = pages - 1;
    if (page === before) return;
    render();
    var top = cardsEl.getBoundingClientRect().top;
    var bar = $("toolbar"), sticky = getComputedStyle(bar).position === "sticky" ? bar.offsetHeight : 0;
    if (top < sticky) window.scrollTo(0, window.scrollY + top - sticky - 8);
  }

  function clearFilters() {
    $("search").value = "";
    ["filter-predicted", "filter-truth", "filter-correct", "filter-blank", "filter-failed", "filter-model", "filter-method", "filter-class", "filter-match", "min-score", "filter-region", "max-iou", "filter-best"].forEach(function (id) {
      $(id).value = "";
    });
    $("filter-lowconf").checked = false;
  }

  function setSelect(id, value) {
    var el = $(id);
    el.value = value;
    if (el.value !== value) el.value = ""; // no such option
  }

  // ---- events ------------------------------------------------------------------------------------------------
  var toolbar = $("toolbar");
  toolbar.addEventListener("input", function (ev) {
    var id = ev.target.id;
    if (id === "search" || id === "min-score" || id === "max-iou") update();
    else if (id === "threshold") {
      $("filter-lowconf").checked = true;
      update();
    }
  });
  toolbar.addEventListener("change", function (ev) {
    var id = ev.target.id;
    if (id === "search" || id === "threshold" || id === "min-score" || id === "max-iou") return; // handled on input
    if (id === "thumbs") {
      cardsEl.dataset.thumbs = ev.target.value;
      return;
    }
    if (id === "sort") $("sort-dir").value = ev.target.value === "name" || ev.target.value === "id" ? "asc" : "desc";
    if (id === "page-size") {
      var first = page * (parseInt(ev.target.dataset.was, 10) || 120);
      ev.target.dataset.was = ev.target.value;
      page = Math.floor(first / pageSize());
      render();
      return;
    }
    update();
  });
  $("page-size").dataset.was = $("page-size").value;
  document.addEventListener("click", function (ev) {
    var el = ev.target.closest ? ev.target.closest("button") : null;
    if (!el) return;
    if (el.hasAttribute("data-page")) return goTo(el.getAttribute("data-page"));
    if (el.id === "classes-more") return renderClasses(true);
    if (el.id === "reset" || el.id === "show-all") {
      clearFilters();
      return update();
    }
    var filter = el.getAttribute("data-filter");
    if (el.hasAttribute("data-truth")) {
      clearFilters();
      setSelect("filter-truth", el.getAttribute("data-truth"));
      setSelect("filter-predicted", el.getAttribute("data-pred"));
    } else if (filter) {
      clearFilters();
      var key = el.getAttribute("data-key");
      if (filter === "predicted") setSelect("filter-predicted", key);
      else if (filter === "truth") setSelect("filter-truth", key);
      else if (filter === "wrong" || filter === "correct") {
        $("filter-correct").value = filter;
        if (key) setSelect("filter-truth", key);
      } else if (filter === "match") {
        setSelect("filter-match", el.getAttribute("data-match") || "");
        if (key) setSelect("filter-class", key);
      } else if (filter === "score" || filter === "best") {
        if (key) setSelect("filter-class", key);
        if (filter === "best") $("filter-best").value = "true";
      } else if (filter === "segment") {
        setSelect("filter-region", el.getAttribute("data-region") || "");
        if (key) setSelect("filter-class", key);
      } else if (filter === "failed") $("filter-failed").value = "true";
      else if (filter === "blank") $("filter-blank").value = "true";
    } else return;
    update();
    toolbar.scrollIntoView({ block: "start" });
  });
  document.addEventListener("keydown", function (ev) {
    var tag = ev.target && ev.target.tagName;
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA" || ev.altKey || ev.ctrlKey || ev.metaKey) return;
    if (ev.key === "ArrowRight") goTo("next");
    else if (ev.key === "ArrowLeft") goTo("prev");
  });
  // a thumbnail that does not load (a moved or deleted file) shows as a hatched box, not a broken-image icon
  document.addEventListener(
    "error",
    function (ev) {
      if (ev.target && ev.target.tagName === "IMG") ev.target.classList.add("broken");
    },
    true
  );

  // ---- first render ------------------------------------------------------------------------------------------
  renderHeader();
  renderLegend();
  renderClasses();
  renderConfusion();
  renderDetections();
  if (SEG) SEG.renderTable();
  if (SCO) SCO.renderTable();
  fillSelects();
  if (DET && DET.has_truth && detErrors > 0) {
    $("filter-match").value = "errors";
    openedOn = ["filter-match", "errors"];
    var nd = $("notice");
    nd.innerHTML = "Opened on the " + esc(plural(detErrors, "error")) + " (false positives and missed objects, of " + esc(num(detJudged)) + " judged). " + '<button type="button" id="show-all">Show all ' + esc(num(N)) + "</button>";
    nd.hidden = false;
  } else if (hasTruth && wrongCards > 0) {
    $("filter-correct").value = "wrong";
    openedOn = ["filter-correct", "wrong"];
    var n = $("notice");
    n.innerHTML = "Opened on the " + esc(plural(wrongCards, "wrong card")) + " (of " + esc(num(truthCards)) + " with a true class). " + '<button type="button" id="show-all">Show all ' + esc(num(N)) + "</button>";
    n.hidden = false;
  } else if (hasTruth) {
    var n2 = $("notice");
    n2.textContent = "No wrong prediction: every card with a true class is right.";
    n2.hidden = false;
  }
  update();
})();
