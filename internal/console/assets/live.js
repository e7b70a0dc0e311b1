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
      if (g.getAttribute("data-state") === step.s) { return; }
      var st = "st-" + step.s;
      g.setAttribute("class", "node " + st);
      g.querySelector("rect").setAttribute("class", st);
      g.querySelector("text.status").textContent = step.t;
      g.setAttribute("data-state", step.s);
    });
    var fs = document.getElementById("flow-state");
    if (fs) { fs.textContent = msg.flow; fs.className = "state st-" + msg.flow; }
  });
})();
