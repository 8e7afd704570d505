/* gradcam report page, the part for videos and volumes (report/videos.py): one card per video (its strip of key frames,
 * its overlay video playable in place) and one per volume (its montage, its slices' classes, its NIfTI map). A classic
 * script loaded before app.js, which calls window.GRADCAM_SEQUENCES(kit) once; kit holds app.js's helpers (esc, url,
 * pct, num, plural, thumbHtml, nameHtml).
 *
 * Such a card's class is the one most of its frames (slices) explain, its probability its best frame's (slice's), so
 * the filters, the sort and the class counts take a video or a volume as one input, whatever its number of frames.
 *
 * Hooks for scripts and tests (stable):
 *   Cards: article.card.card-video with data-id, data-input, data-kind ("video"), data-class, data-probability,
 *     data-frames (the explained frames), data-blank, data-ok, data-correct, data-predicted, data-truth; inside:
 *     video.overlay-video (the overlay video, src relative to the page), .strip > figure.key[data-frame][data-time]
 *     [data-best="true"|"false"][data-change="true"|"false"] (an img and its figcaption: time, class, probability),
 *     or p.strip-note (why there is no strip: one line).
 *   article.card.card-volume with data-id, data-input, data-kind ("volume"), data-class, data-probability,
 *     data-slices, data-blank, data-ok; inside: the montage's thumbnail, .intensity, .classes-over, a.nifti.
 */
window.GRADCAM_SEQUENCES = function (kit) {
  "use strict";
  var esc = kit.esc, pct = kit.pct, num = kit.num, url = kit.url;

  function label(name, index) {
    return name != null && name !== "" ? String(name) : index != null ? String(index) : "";
  }
  function seconds(t) {
    return typeof t === "number" ? (t < 60 ? t.toFixed(2) + " s" : Math.floor(t / 60) + ":" + ("0" + (t % 60).toFixed(1)).slice(-4)) : "–";
  }
  function attrs(c, j, extra) {
    var correct = c.correct === true ? "true" : c.correct === false ? "false" : "";
    return ' data-id="' + esc(c.id != null ? c.id : j) + '" data-input="' + esc(c.input) + '" data-kind="' + esc(c.kind) + '" data-class="' + esc(label(c.class_name, c.class_index)) + '" data-probability="' + (typeof c.probability === "number" ? c.probability : "") + '" data-blank="' + (c.blank ? "true" : "false") + '" data-ok="true" data-correct="' + correct + '" data-predicted="' + esc(label(c.predicted, c.predicted_index)) + '" data-truth="' + esc(c.true_class == null ? "" : c.true_class) + '"' + extra;
  }
  function classesLine(c, what) {
    var parts = (c.classes || []).map(function (e) {
      return "<bdi>" + esc(label(e.class_name, e.class_index)) + "</bdi> " + num(e.count);
    });
    return '<div class="line classes-over"><span class="k">classes over ' + esc(kit.plural(c.count, what)) + "</span> " + parts.join(", ") + "</div>";
  }
  function explainedLine(c, what) {
    var h = '<div class="line"><span class="k">explained</span> <b class="cls">' + esc(label(c.class_name, c.class_index)) + "</b>";
    if (c.probability != null) h += ' <span class="p" title="the most confident ' + what + '">' + pct(c.probability) + "</span>";
    return h + ' <span class="muted">best ' + what + " " + esc(c.best) + "</span></div>";
  }
  function badges(c) {
    var b = "";
    if (c.correct === true) b += '<span class="badge badge-good">correct</span>';
    if (c.correct === false) b += '<span class="badge badge-bad">wrong</span>';
    if (c.blank) b += '<span class="badge badge-warn" title="every map is blank">blank</span>';
    if (c.replaced) b += '<span class="badge badge-warn" title="a later run with other settings wrote over its output">replaced</span>';
    return b ? '<div class="badges">' + b + "</div>" : "";
  }
  function meta(c) {
    var m = [c.model, c.method, (c.layers || []).join(", ")].filter(function (x) { return x; });
    return m.length ? '<div class="meta">' + m.map(function (x) { return "<bdi>" + esc(x) + "</bdi>"; }).join(" · ") + "</div>" : "";
  }
  function links(pairs) {
    var h = pairs.filter(function (p) { return url(p[1]); }).map(function (p) {
      return '<a' + (p[2] ? ' class="' + p[2] + '"' : "") + ' href="' + esc(url(p[1])) + '" target="_blank" rel="noopener">' + esc(p[0]) + "</a>";
    }).join("");
    return h ? '<div class="links">' + h + "</div>" : "";
  }

  // a key frame: its thumbnail (cut from the overlay video) and its time, class and probability
  function keyHtml(k) {
    var w = k.thumb_w > 0 ? k.thumb_w : 192, hgt = k.thumb_h > 0 ? k.thumb_h : 144;
    var cls = label(k.class_name, k.class_index);
    var cap = seconds(k.time) + " · <bdi>" + esc(cls) + "</bdi> " + pct(k.probability);
    var title = "frame " + k.frame + (k.best ? ", the most confident" : "") + (k.change ? ", the class changes here" : "");
    return '<figure class="key' + (k.best ? " key-best" : "") + (k.change ? " key-change" : "") + '" data-frame="' + esc(k.frame) + '" data-time="' + esc(k.time) + '" data-best="' + (k.best ? "true" : "false") + '" data-change="' + (k.change ? "true" : "false") + '" title="' + esc(title) + '">' + (url(k.thumb) ? '<img src="' + esc(url(k.thumb)) + '" loading="lazy" decoding="async" width="' + w + '" height="' + hgt + '" alt="frame ' + esc(k.frame) + '">' : '<span class="thumb-missing">no frame</span>') + "<figcaption>" + cap + "</figcaption></figure>";
  }

  function videoHtml(c, j) {
    var h = '<article class="card card-wide card-video' + (c.correct === false ? " is-wrong" : "") + '"' + attrs(c, j, ' data-frames="' + esc(c.count) + '"') + ">";
    if (url(c.overlay)) {
      var poster = (c.strip || []).filter(function (k) { return k.best && k.thumb; })[0];
      h += '<video class="overlay-video" controls preload="metadata" muted playsinline src="' + esc(url(c.overlay)) + '"' + (poster ? ' poster="' + esc(url(poster.thumb)) + '"' : "") + "></video>";
    }
    if (c.strip && c.strip.length) h += '<div class="strip" style="grid-template-columns:repeat(' + (c.strip.length <= 4 ? c.strip.length : Math.ceil(c.strip.length / 2)) + ',1fr)">' + c.strip.map(keyHtml).join("") + "</div>";
    if (c.strip_note) h += '<p class="strip-note">' + esc(c.strip_note) + "</p>";
    h += '<div class="body">' + kit.nameHtml(c) + badges(c) + explainedLine(c, "frame");
    if (c.true_class != null && c.true_class !== "") h += '<div class="line"><span class="k">true</span> ' + esc(c.true_class) + "</div>";
    h += classesLine(c, "frame");
    if (typeof c.duration === "number") h += '<div class="line"><span class="k">last explained frame at</span> ' + seconds(c.duration) + "</div>";
    h += meta(c) + links([["video", c.original], ["overlay video", c.overlay]]);
    return h + "</div></article>";
  }

  function volumeHtml(c, j) {
    var h = '<article class="card card-volume"' + attrs(c, j, ' data-slices="' + esc(c.count) + '"') + ">";
    h += '<div class="thumbs thumbs-one">' + kit.thumbHtml(c.overlay_thumb, c.overlay, "overlay", c) + "</div>";
    h += '<div class="body">' + kit.nameHtml(c) + badges(c);
    if (c.whole) h += '<div class="line whole"><span class="k">explained</span> <b class="cls">' + esc(label(c.class_name, c.class_index)) + "</b> " + (c.probability != null ? '<span class="p">' + pct(c.probability) + "</span> " : "") + '<span class="muted">the whole volume at once</span></div>';
    else h += explainedLine(c, "slice") + classesLine(c, "slice");
    if (c.intensity) h += '<div class="line intensity"><span class="k">intensity</span> ' + esc(c.intensity) + "</div>";
    h += meta(c) + links([["scan", c.original], ["montage", c.overlay], ["NIfTI map", c.nifti, "nifti"]]);
    return h + "</div></article>";
  }

  return {
    is: function (c) {
      return c.kind === "video" || c.kind === "volume";
    },
    cardHtml: function (c, j) {
      return c.kind === "video" ? videoHtml(c, j) : volumeHtml(c, j);
    },
  };
};
