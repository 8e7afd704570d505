/* gradcam report page, a segmenter's part (report/segments.py): its cards (one per image and region), its table per
 * class in place of the confusion matrix, its counts and its controls. A classic script loaded before app.js, which
 * calls window.GRADCAM_SEGMENTS(kit) once when header.segmentation is set; kit holds app.js's helpers (esc, url, pct,
 * num, plural, classKey, keyLabel, thumbHtml, nameHtml, collator, $) and the table (kit.table = header.segmentation).
 *
 * Hooks for scripts and tests (stable), shown only in a segmenter's report:
 *   #filter-class   select: "" all, "=KEY" the regions of one class (KEY: its name, or its index when it has none)
 *   #filter-region  select: "" all, "explained" (every region but the missed ones), "predicted", "box", "mask", "truth",
 *                   "missed" (truth says the class, the model another)
 *   #max-iou        number input ("input" event): only regions whose class's IoU is below this ("" = any; regions
 *                   without an IoU are left out while it is set)
 *   #sort           also "iou", "dice", "energy_in_region", "mean_probability", "area_fraction"
 *   #segments       the table per class: buttons [data-filter="segment"][data-region="explained"|"missed"]
 *                   [data-key="=KEY"|""] (its last row, every class: ""); #counts also has such buttons
 *   Cards: article.card.card-seg with data-id, data-input, data-kind ("segment"), data-class, data-region ("" for an
 *     image with no region), data-iou, data-dice, data-energy ("" when none), data-blank, data-ok.
 */
window.GRADCAM_SEGMENTS = function (kit) {
  "use strict";
  var T = kit.table, esc = kit.esc, pct = kit.pct, num = kit.num, $ = kit.$;
  var KINDS = {
    predicted: "where the model says this class",
    box: "the box named with --region",
    mask: "the mask named with --mask",
    truth: "this class's true mask",
    missed: "missed: the truth says this class, the model another",
  };
  var judged = !!T.has_truth;

  function two(v) {
    return typeof v === "number" ? v.toFixed(2) : "–";
  }
  function label(c) {
    return c.class_name != null && c.class_name !== "" ? String(c.class_name) : c.class_index != null ? String(c.class_index) : "";
  }
  function attr(v) {
    return typeof v === "number" ? String(v) : "";
  }

  // a region's card: the photo and its map (its own overlay, else the image's picture with every region outlined)
  function cardHtml(c, j) {
    var cls = label(c), missed = c.region === "missed";
    var h = '<article class="card card-seg' + (missed ? " is-wrong" : "") + '" data-id="' + esc(c.id != null ? c.id : j) + '" data-input="' + esc(c.input) + '" data-kind="segment" data-class="' + esc(cls) + '" data-region="' + esc(c.region || "") + '" data-iou="' + attr(c.iou) + '" data-dice="' + attr(c.dice) + '" data-energy="' + attr(c.energy_in_region) + '" data-blank="' + (c.blank ? "true" : "false") + '" data-ok="true">';
    h += '<div class="thumbs">' + kit.thumbHtml(c.thumb, c.original, "original", c) + kit.thumbHtml(c.overlay_thumb, c.overlay, "overlay", c) + "</div>";
    h += '<div class="body">' + kit.nameHtml(c);
    var b = "";
    if (missed) b += '<span class="badge badge-bad" title="' + esc(KINDS.missed) + '">missed</span>';
    if (c.region == null) b += '<span class="badge badge-low" title="no class covered the minimum area (--min-area)">no region</span>';
    if (c.blank) b += '<span class="badge badge-warn" title="the heat map is blank: no evidence for this region at this layer">blank</span>';
    if (b) h += '<div class="badges">' + b + "</div>";
    if (c.region != null) h += regionLines(c, cls);
    var meta = [c.model, c.method, (c.layers || []).join(", ")].filter(function (x) { return x; });
    if (c.rank != null) meta.push("region " + c.rank);
    if (meta.length) h += '<div class="meta">' + meta.map(function (m) { return "<bdi>" + esc(m) + "</bdi>"; }).join(" · ") + "</div>";
    var links = [];
    if (kit.url(c.original)) links.push('<a href="' + esc(kit.url(c.original)) + '" target="_blank" rel="noopener">original</a>');
    if (kit.url(c.overlay)) links.push('<a href="' + esc(kit.url(c.overlay)) + '" target="_blank" rel="noopener">' + (c.own_overlay ? "its map" : "picture") + "</a>");
    if (kit.url(c.picture)) links.push('<a href="' + esc(kit.url(c.picture)) + '" target="_blank" rel="noopener">every region</a>');
    if (links.length) h += '<div class="links">' + links.join("") + "</div>";
    return h + "</div></article>";
  }

  function regionLines(c, cls) {
    var h = '<div class="line"><span class="k" title="' + esc(KINDS[c.region] || "") + '">' + esc(c.region) + '</span> <b class="cls">' + esc(cls) + "</b>";
    if (c.class_name && c.class_index != null) h += ' <span class="muted">#' + esc(c.class_index) + "</span>";
    h += "</div>";
    h += '<div class="line"><span class="k">area</span> <span title="its share of the photo' + (typeof c.area === "number" ? ": " + esc(num(c.area)) + " pixels" : "") + '">' + pct(c.area_fraction) + "</span>";
    h += ' · <span class="k">mean probability</span> ' + pct(c.mean_probability);
    if (!c.own_overlay) h += ' · <span class="muted" title="no map of its own (--each): the image\'s picture, every region outlined">every region</span>';
    h += "</div>";
    var m = [];
    if (typeof c.energy_in_region === "number") m.push('<span title="the share of its map\'s energy inside its region"><span class="k">energy in region</span> ' + pct(c.energy_in_region) + "</span>");
    if (typeof c.iou === "number") m.push('<span title="the class\'s IoU over the photo, prediction against truth"><span class="k">IoU</span> ' + two(c.iou) + "</span>");
    if (typeof c.dice === "number") m.push('<span title="the class\'s Dice over the photo"><span class="k">Dice</span> ' + two(c.dice) + "</span>");
    if (typeof c.missed_area === "number" && c.missed_area > 0) m.push('<span title="the pixels the truth gives the class and the model another"><span class="k">missed</span> ' + esc(num(c.missed_area)) + " px</span>");
    if (m.length) h += '<div class="metrics">' + m.join("") + "</div>";
    return h;
  }

  // the counts: regions explained, and with truth the missed ones, the mean IoU and Dice over the classes
  function tiles() {
    var all = T.all || {};
    function tile(text, n, region, extra) {
      var inner = '<span class="tile-v">' + esc(num(n || 0)) + '</span><span class="tile-k">' + esc(text) + "</span>";
      return '<button type="button" class="tile' + (n ? extra : "") + '" data-filter="segment" data-region="' + region + '" title="show these cards">' + inner + "</button>";
    }
    function ratio(text, v, title) {
      return '<span class="tile" title="' + esc(title) + '"><span class="tile-v">' + esc(v) + '</span><span class="tile-k">' + esc(text) + "</span></span>";
    }
    var h = tile("regions", all.regions, "explained", "");
    if (judged) h += tile("missed regions", all.missed, "missed", " tile-bad") + ratio("mean IoU", two(all.iou), "the mean over the classes of each class's mean IoU") + ratio("mean Dice", two(all.dice), "the mean over the classes of each class's mean Dice");
    return h + ratio("energy in region", pct(all.energy_in_region), "the mean share of a region's map inside its region");
  }

  // the table per class, in place of the confusion matrix; a click on a number shows those cards
  function renderTable() {
    $("panel-segments").hidden = false;
    function cell(n, region, key, bad) {
      if (!n) return '<td><span class="zero">0</span></td>';
      return '<td><button type="button"' + (bad ? ' class="bad"' : "") + ' data-filter="segment" data-region="' + region + '" data-key="' + esc(key) + '">' + num(n) + "</button></td>";
    }
    function row(e, text, key) {
      var h = '<td class="l" title="' + esc(text) + '">' + esc(text) + "</td><td>" + num(e.images) + "</td>" + cell(e.regions, "explained", key);
      if (judged) h += cell(e.missed, "missed", key, true);
      h += "<td>" + pct(e.area_fraction) + "</td><td>" + pct(e.mean_probability) + "</td><td>" + pct(e.energy_in_region) + "</td>";
      if (judged) h += "<td>" + two(e.iou) + "</td><td>" + two(e.dice) + "</td><td>" + (e.missed_area ? num(e.missed_area) : '<span class="zero">0</span>') + "</td>";
      return h;
    }
    var h = '<table class="classes seg-classes"><thead><tr><th class="l">class</th><th title="images where the model or the truth gives it a pixel">images</th><th title="its regions explained (missed ones apart)">regions</th>';
    if (judged) h += '<th title="its missed regions: the truth says it, the model another class">missed</th>';
    h += '<th title="the mean share of the photo its regions cover">area</th><th title="the class\'s mean probability in its regions, averaged">prob.</th><th title="energy in region: the mean share of a region\'s map inside its region">energy</th>';
    if (judged) h += '<th title="its mean IoU over the images where the truth or the model gives it a pixel">IoU</th><th title="its mean Dice over the same images">Dice</th><th title="the pixels the truth gives it and the model another, in all">missed px</th>';
    h += "</tr></thead><tbody>";
    T.classes.forEach(function (e) {
      var key = kit.classKey(e.class_name, e.class_index) || "";
      h += "<tr>" + row(e, kit.keyLabel(key || "=?"), key) + "</tr>";
    });
    h += '</tbody><tfoot><tr class="all">' + row(T.all || {}, "all classes", "") + "</tr></tfoot></table>";
    var note = kit.plural(T.classes.length, "class") + (judged ? ", the lowest IoU first; the last row's IoU and Dice: the mean over the classes" : ", the most regions first") + "; click a number to filter.";
    $("segments").innerHTML = '<p class="muted small">' + esc(note) + "</p>" + h;
  }

  // the controls: the class, the region's kind (those present), the IoU threshold (with truth)
  function fillControls() {
    $("ctl-class").hidden = $("ctl-region").hidden = false;
    $("ctl-iou").hidden = !judged;
    var rows = T.classes.slice().sort(function (a, b) {
      return kit.collator.compare(kit.keyLabel(kit.classKey(a.class_name, a.class_index) || "=?"), kit.keyLabel(kit.classKey(b.class_name, b.class_index) || "=?"));
    });
    var h = '<option value="">all classes</option>';
    rows.forEach(function (e) {
      var key = kit.classKey(e.class_name, e.class_index);
      if (key && e.regions + e.missed) h += '<option value="' + esc(key) + '">' + esc(kit.keyLabel(key)) + " (" + num(e.regions + e.missed) + ")</option>";
    });
    $("filter-class").innerHTML = h;
    var present = {};
    kit.cards.forEach(function (c) {
      if (c.kind === "segment" && c.region) present[c.region] = (present[c.region] || 0) + 1;
    });
    var r = '<option value="">all</option><option value="explained">not missed</option>';
    Object.keys(KINDS).forEach(function (k) {
      if (present[k]) r += '<option value="' + k + '">' + esc(k) + " (" + num(present[k]) + ")</option>";
    });
    $("filter-region").innerHTML = r;
  }

  function sorts() {
    var h = '<option value="energy_in_region">energy in region</option><option value="mean_probability">mean probability</option><option value="area_fraction">area</option>';
    return (judged ? '<option value="iou">IoU</option><option value="dice">Dice</option>' : "") + h;
  }

  // whether a card passes the segmenter's filters (a card of another task never does while one is set)
  function keep(f, c) {
    if (f.region === "explained" && !(c.region && c.region !== "missed")) return false;
    if (f.region && f.region !== "explained" && c.region !== f.region) return false;
    if (f.maxIou != null && !(typeof c.iou === "number" && c.iou < f.maxIou)) return false;
    return true;
  }

  return { cardHtml: cardHtml, tiles: tiles, renderTable: renderTable, fillControls: fillControls, sorts: sorts, keep: keep };
};
