// Live updates of a flow page: the server sends the states of the flow
// and its steps whenever the engine notifies a change; each node's class
// (and so its colour) and its status line follow.
(function () {
  var svg = document.querySelector("svg[data-flow]");
  if (!svg || !window.EventSource) { return; }
  var src = new EventSource("/flows/" + svg.dataset.flow + "/live");
  src.addEventListener("states", function (ev) {
    var msg = JSON.parse(ev.data);
    Object.keys(msg.steps).forEach(function (id) {
      var g = svg.querySelector('g.node[data-id="' + id + '"]');
      if (!g) { return; }
      var step = msg.steps[id];
      var waiting = step.w ? "1" : "";
      if (g.getAttribute("data-state") === step.s && (g.getAttribute("data-waiting") || "") === waiting) { return; }
      var st = "st-" + step.s;
      var cls = "node " + st;
      if (g.hasAttribute("data-spawned-by")) { cls += " spawned"; }
      if (step.w) { cls += " waiting"; }
      g.setAttribute("class", cls);
      g.querySelector("rect").setAttribute("class", st);
      g.querySelector("text.status").textContent = step.t;
      var title = g.querySelector("title");
      if (title) { title.textContent = title.textContent.replace(/^([^:]*: )[^\n]*/, "$1" + step.f); }
      g.setAttribute("data-state", step.s);
      g.setAttribute("data-waiting", waiting);
    });
    var fs = document.getElementById("flow-state");
    if (fs) { fs.textContent = msg.flow; fs.className = "state st-" + msg.flow; }
  });
})();
