//! Watch streams.

use super::request::{PartialMetadata, at_version};
use super::{App, Query};
use crate::resources::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult};
use crate::store::{self, EventType};
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// One watch event, serialised from the object as it is (no copy); members in the order
/// `json!` gives them (sorted keys).
#[derive(serde::Serialize)]
struct WatchEvent<'a> {
    object: &'a Value,
    #[serde(rename = "type")]
    etype: &'a str,
}

/// [`watch_line`] of an object already serialised: the same bytes.
fn watch_line_of_json(etype: &str, object: &[u8]) -> Bytes {
    let mut s = Vec::with_capacity(object.len() + 32);
    s.extend_from_slice(b"{\"object\":");
    s.extend_from_slice(object);
    s.extend_from_slice(b",\"type\":");
    let _ = serde_json::to_writer(&mut s, etype);
    s.extend_from_slice(b"}\n");
    Bytes::from(s)
}

fn watch_line(etype: &str, obj: &Value) -> Bytes {
    let mut s = serde_json::to_vec(&WatchEvent { object: obj, etype }).unwrap_or_default();
    s.push(b'\n');
    Bytes::from(s)
}

/// What a watch selects and how it presents objects.
pub(super) struct Watch {
    pub labels: LabelSelector,
    pub fsel: FieldSelector,
    /// As one-row Tables (`includeObject`).
    pub table: Option<String>,
    /// As `PartialObjectMetadata` (bookmarks too, as kube-apiserver transforms every object).
    pub partial: Option<PartialMetadata>,
    /// Injected faults: `410 Gone` at once, or a cut after a while.
    pub faults: crate::faults::WatchPlan,
}

/// A watch stream (<https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>):
/// newline-delimited `{"type","object"}` events, bookmarks on request, `410 Gone` as an ERROR event.
pub(super) fn watch(
    app: &Arc<App>,
    ri: ResourceInfo,
    ns: Option<String>,
    w: Watch,
    q: &Query,
) -> ApiResult<Response> {
    let Watch { labels, fsel, table, partial, faults } = w;
    let store = app.store.clone();
    let app_faults = app.clone();
    let rv_param = q.get("resourceVersion").cloned().unwrap_or_default();
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    // sendInitialEvents defaults to true for resourceVersion "" and "0", false otherwise
    // (API concepts, "Streaming lists"; ListOptions.sendInitialEvents).
    let explicit_initial = q.get("sendInitialEvents").map(|b| b == "true");
    let initial_events = explicit_initial == Some(true);
    let timeout =
        q.get("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()).map(Duration::from_secs);
    let interval = app.bookmark_interval;
    let sk = ri.store_key();
    let ns_filter = ns.clone().filter(|n| !n.is_empty());
    let matches = move |o: &Value| labels.matches(o) && fsel.matches(o);
    // Start: synthetic ADDED for the current state ("" / "0" or sendInitialEvents), or replay after N.
    let (initial, replay, mut rx, start_rv, gone) = {
        let from_state = explicit_initial.unwrap_or(rv_param.is_empty() || rv_param == "0");
        if explicit_initial == Some(false) && (rv_param.is_empty() || rv_param == "0") {
            // No initial state: changes from now on.
            let (_, rx, rv) = store.watch_from(store.current_rv())?;
            (vec![], vec![], rx, rv, None)
        } else if from_state {
            let (objs, rx, rv) = store.watch_state(&sk, ns_filter.as_deref());
            (objs, vec![], rx, rv, None)
        } else {
            let n: u64 = rv_param.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {rv_param}"))
            })?;
            match store.watch_from(n) {
                Ok((evs, rx, rv)) if faults.gone => {
                    // Injected: as if the history had been compacted past `n`.
                    drop(evs);
                    let e =
                        ApiError::gone(format!("too old resource version: {n} ({})", rv.max(n)));
                    (vec![], vec![], rx, 0, Some(e))
                }
                Ok((evs, rx, rv)) => (vec![], evs, rx, rv.max(n), None),
                Err(e) => {
                    let rx = store.subscribe();
                    (vec![], vec![], rx, 0, Some(e))
                }
            }
        }
    };
    let mut expire = store.expire_watches.subscribe();
    let mut closed = store.closed_resources.subscribe();
    // Table watches: one-row Tables, column definitions only in the first event (as kube-apiserver).
    let first = std::sync::atomic::AtomicBool::new(true);
    let ri_t = ri.clone();
    // A watch sending objects as stored: the JSON of each change is made once, for every such
    // watch (events.k8s.io Events are converted from core ones, so not as stored).
    let served_version = ri.api_version();
    let as_stored = partial.is_none()
        && table.is_none()
        && !crate::convert::is_events_api(&ri.group, &ri.plural);
    let event_line = move |etype: &str, ev: &store::Event, line: &dyn Fn(&str, &Value) -> Bytes| {
        if !as_stored
            || ev.obj.get("apiVersion").and_then(Value::as_str) != Some(served_version.as_str())
        {
            return line(etype, &ev.obj);
        }
        let object =
            ev.json.get_or_init(|| Bytes::from(serde_json::to_vec(&*ev.obj).unwrap_or_default()));
        watch_line_of_json(etype, object)
    };
    // The event's line: the object at the requested version, or its Table row.
    let ri_line = ri.clone();
    let partial_line = partial.clone();
    let line = move |etype: &str, o: &Value| -> Bytes {
        let o = at_version(&ri_line, o);
        if let Some(p) = &partial_line {
            return watch_line(etype, &p.of(&o));
        }
        match &table {
            None => watch_line(etype, &o),
            Some(include) => {
                let cols = first.swap(false, std::sync::atomic::Ordering::Relaxed);
                let meta = json!({"resourceVersion": store::rv_of(&o)});
                let mut t = crate::table::table(
                    &ri_t,
                    std::slice::from_ref(o.as_ref()),
                    meta,
                    include,
                    cols,
                );
                if !cols && let Some(m) = t.as_object_mut() {
                    m.remove("columnDefinitions");
                }
                watch_line(etype, &t)
            }
        }
    };
    // Bookmarks carry the kind served, or PartialObjectMetadata.
    let (kind, api_version) = match &partial {
        Some(p) => ("PartialObjectMetadata".to_string(), p.api_version.clone()),
        None => (ri.kind.clone(), ri.api_version()),
    };
    let stream = async_stream::stream! {
        if let Some(e) = gone {
            yield Ok::<Bytes, std::io::Error>(watch_line("ERROR", &e.to_status()));
            return;
        }
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let cut = faults.cut.map(|(after, how)| (tokio::time::Instant::now() + after, how));
        let mut last = start_rv;
        for o in &initial {
            if matches(o) {
                yield Ok(line("ADDED", o));
            }
        }
        // The end-of-initial-events bookmark goes, like every bookmark, only to watches that
        // allow bookmarks (the cacher registers only those for bookmark dispatch).
        if initial_events && bookmarks {
            let bm = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": last.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}});
            yield Ok(watch_line("BOOKMARK", &bm));
        }
        let relevant = |ev: &store::Event| ev.store_key == sk && ns_filter.as_deref().is_none_or(|n| n == ev.ns);
        // The cacher's conversion (k8s.io/apiserver/pkg/storage/cacher, cacheWatcher
        // convertToWatchEvent): a deleted object never passes the filter; an object that stops
        // passing (or is deleted) yields DELETED with its previous state at the event's version.
        let render = |ev: &store::Event| -> Option<Bytes> {
            let now_m = ev.etype != EventType::Deleted && matches(&ev.obj);
            let prev_m = ev.prev.as_ref().is_some_and(|p| matches(p));
            match (now_m, prev_m, &ev.prev) {
                (true, true, _) => Some(event_line(ev.etype.as_str(), ev, &line)),
                (true, false, _) => Some(event_line("ADDED", ev, &line)),
                (false, true, Some(prev)) => {
                    let mut old = (**prev).clone();
                    old["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
                    Some(line("DELETED", &old))
                }
                (false, false, None) if ev.etype == EventType::Deleted && matches(&ev.obj) => {
                    Some(event_line("DELETED", ev, &line))
                }
                _ => None,
            }
        };
        for ev in &replay {
            last = last.max(ev.rv);
            if relevant(ev)
                && let Some(b) = render(ev) { yield Ok(b); }
        }
        let mut tick = tokio::time::interval(interval);
        tick.tick().await;
        // One bookmark 2 s before the watch's deadline (cacheWatcher.nextBookmarkTime), so that
        // the client resumes from a version as fresh as possible.
        let mut pre_deadline = deadline
            .filter(|_| bookmarks)
            .and_then(|d| d.checked_sub(Duration::from_secs(2)))
            .filter(|t| *t > tokio::time::Instant::now());
        loop {
            let sleep_deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending::<()>().await,
                }
            };
            let sleep_pre = async {
                match pre_deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending::<()>().await,
                }
            };
            let sleep_cut = async {
                match cut {
                    Some((at, _)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                r = rx.recv() => match r {
                    Ok(ev) => {
                        if ev.rv <= last { continue; }
                        last = ev.rv;
                        if relevant(&ev)
                            && let Some(b) = render(&ev) { yield Ok(b); }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        let e = ApiError::gone(format!("too old resource version: {last} ({})", last + 1));
                        yield Ok(watch_line("ERROR", &e.to_status()));
                        return;
                    }
                    Err(_) => return,
                },
                r = expire.recv() => {
                    if let Ok(at) = r {
                        let e = ApiError::gone(format!("too old resource version: {last} ({})", at + 1));
                        yield Ok(watch_line("ERROR", &e.to_status()));
                    }
                    return;
                }
                _ = tick.tick() => {
                    if bookmarks {
                        let bm = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": last.to_string()}});
                        yield Ok(watch_line("BOOKMARK", &bm));
                    }
                }
                r = closed.recv() => {
                    // The resource is no longer served: deliver what happened up to its removal,
                    // then end the stream.
                    match r {
                        Ok((closed_sk, at)) if closed_sk == sk => {
                            while let Ok(ev) = rx.try_recv() {
                                if ev.rv <= last { continue; }
                                last = ev.rv;
                                if relevant(&ev)
                                    && let Some(b) = render(&ev) { yield Ok(b); }
                                if ev.rv >= at { break; }
                            }
                            return;
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                        _ => {}
                    }
                }
                _ = sleep_pre => {
                    pre_deadline = None;
                    let bm = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": last.to_string()}});
                    yield Ok(watch_line("BOOKMARK", &bm));
                }
                _ = sleep_deadline => return,
                _ = sleep_cut => {
                    app_faults.faults.count_cut();
                    if let Some((_, crate::faults::Cut::Reset)) = cut {
                        yield Err(std::io::Error::new(
                            std::io::ErrorKind::ConnectionReset,
                            "injected watch reset",
                        ));
                    }
                    return;
                }
            }
        }
    };
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_of_shared_json_is_the_line_of_the_object() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"k": "v \"quoted\" ü"}}, "data": {"x": "1\n2"}});
        for etype in ["ADDED", "MODIFIED", "DELETED"] {
            let json = serde_json::to_vec(&obj).expect("json");
            assert_eq!(watch_line_of_json(etype, &json), watch_line(etype, &obj), "{etype}");
        }
    }
}
