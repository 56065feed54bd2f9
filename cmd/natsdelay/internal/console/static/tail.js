// natsdelay console: the live tail. Reads the page's event stream
// (Server-Sent Events, see tail.go) and shows each lifecycle event as a
// row, newest first. Everything from an event is set as text: nothing
// in it is parsed as HTML.
(function () {
  'use strict';
  var table = document.getElementById('tail');
  if (!table || !window.EventSource) { return; }
  var body = table.tBodies[0];
  var status = document.getElementById('tail-status');
  var droppedEl = document.getElementById('tail-dropped');
  var empty = document.getElementById('tail-empty');
  var keep = 500;
  var kinds = ['scheduled', 'delivered', 'acked', 'nak', 'term', 'expired', 'dead', 'canceled', 'rescheduled', 'replayed'];
  // dropped counts over reconnections: each stream counts from 0.
  var before = 0, dropped = 0;

  function state(s, text) {
    table.dataset.state = s;
    status.textContent = text;
  }
  function showDropped() {
    droppedEl.textContent = (before + dropped) + ' dropped';
    droppedEl.className = before + dropped > 0 ? 'bad' : '';
  }
  function cell(row, text, title) {
    var td = row.insertCell(-1);
    td.textContent = text === undefined || text === null ? '' : String(text);
    if (title) { td.title = title; }
    return td;
  }
  function link(td, href, text) {
    var a = document.createElement('a');
    a.href = href;
    a.textContent = text;
    td.textContent = '';
    td.appendChild(a);
  }
  function add(data) {
    var e;
    try { e = JSON.parse(data); } catch (err) { e = null; }
    var row = document.createElement('tr');
    if (!e || typeof e !== 'object') {
      cell(row, '');
      cell(row, 'not an event');
      cell(row, '');
      cell(row, '');
      cell(row, '');
      cell(row, '');
      cell(row, data);
      cell(row, '');
    } else {
      var at = typeof e.at === 'string' ? e.at : '';
      cell(row, at.length >= 23 ? at.slice(11, 23) : at, at);
      var kind = cell(row, e.kind);
      kind.className = 'kind' + (kinds.indexOf(e.kind) >= 0 ? ' kind-' + e.kind : '');
      var subject = cell(row, e.subject);
      if (typeof e.subject === 'string' && e.subject) {
        link(subject, '/ui/subject?subject=' + encodeURIComponent(e.subject), e.subject);
      }
      cell(row, e.id);
      cell(row, e.attempt).className = 'num';
      cell(row, e.fire_at);
      var detail = e.reason || '';
      if (e.previous_fire_at) { detail = 'moved from ' + e.previous_fire_at; }
      if (e.to) { detail = 'sent to ' + e.to; }
      cell(row, detail);
      cell(row, e.trace_id).className = 'trace';
      var tag = cell(row, '');
      if (typeof e.tag === 'string' && e.tag) {
        link(tag, '/ui/message?tag=' + encodeURIComponent(e.tag), e.tag);
        tag.firstChild.className = 'tag';
      }
    }
    body.insertBefore(row, body.firstChild);
    while (body.rows.length > keep) { body.deleteRow(-1); }
    empty.hidden = true;
  }

  var source = new EventSource(table.dataset.stream);
  source.addEventListener('subscribed', function (ev) {
    before += dropped;
    dropped = 0;
    var subject = '';
    try { subject = JSON.parse(ev.data).subject; } catch (err) { subject = ''; }
    state('live', 'Watching ' + subject);
  });
  source.addEventListener('message', function (ev) { add(ev.data); });
  source.addEventListener('dropped', function (ev) {
    dropped = parseInt(ev.data, 10) || 0;
    showDropped();
  });
  source.addEventListener('end', function (ev) {
    state('ended', 'The stream ended (' + ev.data + '); reconnecting…');
  });
  source.addEventListener('error', function () {
    if (source.readyState === EventSource.CLOSED) {
      state('closed', 'Stopped: the console refused the stream. Reload the page to try again.');
    } else if (table.dataset.state !== 'ended') {
      state('reconnecting', 'Disconnected; reconnecting…');
    }
  });
})();
