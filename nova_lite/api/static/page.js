"use strict";
// The overview page: polls the read-only API and redraws.
// ?interval=SECONDS sets the period: a decimal number from MIN_INTERVAL_S to
// MAX_INTERVAL_S (the server answers 400 to anything else).  The page clamps
// it too, so that no URL can make it poll faster than MIN_INTERVAL_S.
const MIN_INTERVAL_S = 1;
const MAX_INTERVAL_S = 3600;
const DEFAULT_INTERVAL_S = 5;

function pollSeconds(text) {
  if (text === null || !/^[0-9]+(\.[0-9]+)?$/.test(text)) return DEFAULT_INTERVAL_S;
  const seconds = Number(text);
  if (!Number.isFinite(seconds)) return DEFAULT_INTERVAL_S;
  return Math.min(MAX_INTERVAL_S, Math.max(MIN_INTERVAL_S, seconds));
}

const interval = pollSeconds(new URLSearchParams(window.location.search).get("interval")) * 1000;
const BARS = ["VCPU", "MEMORY_MB", "DISK_GB"];
let polls = 0;

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = String(text);
  return node;
}

async function get(path) {
  const response = await fetch(path, {cache: "no-store"});
  const body = await response.json();
  if (!response.ok) throw new Error(body.error ? body.error.message : response.statusText);
  return body;
}

function drawCluster(data) {
  document.getElementById("cluster-size").textContent =
    `(${data.hosts} host(s), ${data.nodes} node(s))`;
  const body = document.querySelector("#cluster tbody");
  body.replaceChildren();
  for (const r of data.resources) {
    const row = el("tr", {"data-rc": r.resource_class});
    row.append(el("td", {class: "rc"}, r.resource_class));
    for (const k of ["total", "reserved", "capacity", "used", "free", "over"]) {
      const cls = k === "over" && r.over > 0 ? "over positive" : k;
      row.append(el("td", {class: cls}, r[k]));
    }
    body.append(row);
  }
}

function drawHosts(data) {
  const box = document.getElementById("hosts");
  box.replaceChildren();
  if (!data.hosts.length) box.append(el("div", {class: "empty"}, "no hosts yet"));
  for (const h of data.hosts) {
    const card = el("div", {class: "host", "data-host": h.host});
    const title = el("div", {});
    title.append(el("span", {class: "name"}, h.host), " ",
                 el("span", {class: "state-" + h.state}, `${h.state}, ${h.status}`),
                 ` \u2014 ${h.nodes} node(s)`);
    card.append(title);
    for (const r of h.resources.filter(r => BARS.includes(r.resource_class))) {
      const pct = r.capacity > 0 ? Math.min(100, 100 * r.used / r.capacity) : (r.used ? 100 : 0);
      const row = el("div", {class: "bar-row", "data-rc": r.resource_class,
                             "data-used": r.used, "data-capacity": r.capacity,
                             "data-free": r.free, "data-over": r.over});
      const bar = el("div", {class: "bar"});
      const used = el("div", {class: "used" + (r.over > 0 ? " overfull" : pct >= 90 ? " full" : "")});
      used.style.width = pct.toFixed(1) + "%";
      bar.append(used);
      row.append(el("span", {class: "rc"}, r.resource_class), bar,
                 el("span", {class: "figures"},
                    `${r.used} / ${r.capacity} used, ${r.free} free` + (r.over ? `, ${r.over} over` : "")));
      card.append(row);
    }
    const pci = h.pci_devices;
    if (pci.total > 0) {
      card.append(el("div", {class: "pci", "data-total": pci.total, "data-free": pci.free,
                             "data-in-use": pci.in_use},
                     `PCI devices: ${pci.free} free of ${pci.total} (${pci.in_use} in use)`));
    }
    // Child providers (GPUs and other devices accounted apart): free of capacity per class.
    for (const [rc, t] of Object.entries(h.providers.resources)) {
      card.append(el("div", {class: "child", "data-rc": rc, "data-capacity": t.capacity,
                             "data-used": t.used, "data-free": t.free},
                     `${rc} on ${h.providers.total} device(s): ${t.free} free of ` +
                     `${t.capacity} (${t.used} in use)`));
    }
    const own = h.traits.filter(t => t !== "COMPUTE_NODE");
    if (own.length) card.append(el("div", {class: "traits"}, "traits: " + own.join(", ")));
    box.append(card);
  }
}

function drawFindings(data) {
  const body = document.querySelector("#findings tbody");
  body.replaceChildren();
  if (!data.findings.length) {
    const row = el("tr", {class: "clean"});
    row.append(el("td", {colspan: "5", class: "empty"}, "no findings: the records are consistent"));
    body.append(row);
  }
  for (const f of data.findings) {
    const row = el("tr", {class: "finding", "data-kind": f.kind, "data-subject": f.subject});
    const resources = Object.entries(f.resources).map(([k, v]) => `${k}=${v}`).join(", ") || "-";
    row.append(el("td", {}, f.kind), el("td", {}, f.subject),
               el("td", {}, `${f.host || "-"}/${f.nodename || "-"}`),
               el("td", {}, resources), el("td", {}, f.detail));
    body.append(row);
  }
}

async function poll() {
  const status = document.getElementById("status");
  status.dataset.interval = String(interval / 1000);
  try {
    const [cluster, hosts, findings] = await Promise.all(
      [get("v1/cluster"), get("v1/hosts"), get("v1/findings")]);
    drawCluster(cluster);
    drawHosts(hosts);
    drawFindings(findings);
    polls += 1;
    status.className = "";
    status.dataset.polls = String(polls);
    status.textContent = `updated ${new Date().toLocaleTimeString()} (every ${interval / 1000} s)`;
  } catch (err) {
    status.className = "error";
    status.textContent = "cannot read the API: " + err.message;
  } finally {
    window.setTimeout(poll, interval);
  }
}
poll();
