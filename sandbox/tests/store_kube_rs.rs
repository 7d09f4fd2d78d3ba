//! Priority 2 through kube-rs: CRUD, errors worded as kube-apiserver words them, resourceVersion,
//! generation, status subresource, selectors, pagination, watch with 410, GC and finalizers.

mod common;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()},
        "data": {"k": "v"}
    }))
    .expect("configmap")
}

fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_errors_and_optimistic_concurrency() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let created =
        cms.create(&PostParams::default(), &cm("a", &[("app", "web")])).await.expect("create");
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    let rv1: u64 = meta.resource_version.as_deref().expect("rv").parse().expect("numeric rv");

    let e =
        api_err(cms.create(&PostParams::default(), &cm("a", &[])).await.expect_err("duplicate"));
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (409, "AlreadyExists", "configmaps \"a\" already exists")
    );

    let e = api_err(cms.get("nope").await.expect_err("missing"));
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (404, "NotFound", "configmaps \"nope\" not found")
    );

    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let e = api_err(deps.get("nope").await.expect_err("missing"));
    assert_eq!(e.message, "deployments.apps \"nope\" not found");

    let mut upd = created.clone();
    upd.data = Some(BTreeMap::from([("k".to_string(), "v2".to_string())]));
    let updated = cms.replace("a", &PostParams::default(), &upd).await.expect("update");
    let rv2: u64 = updated.metadata.resource_version.as_deref().expect("rv").parse().expect("rv");
    assert!(rv2 > rv1);
    // The stale resourceVersion loses.
    let e = api_err(cms.replace("a", &PostParams::default(), &upd).await.expect_err("stale"));
    assert_eq!(e.code, 409);
    assert_eq!(
        e.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // Creating in a missing namespace.
    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "missing");
    let e = api_err(
        other.create(&PostParams::default(), &cm("x", &[])).await.expect_err("no namespace"),
    );
    assert_eq!((e.code, e.message.as_str()), (404, "namespaces \"missing\" not found"));

    // Invalid names are 422 Invalid.
    let e = api_err(
        cms.create(&PostParams::default(), &cm("Bad_Name", &[])).await.expect_err("invalid"),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(e.message.starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"), "{}", e.message);

    // dryRun=All validates but does not persist.
    let pp = PostParams { dry_run: true, ..Default::default() };
    cms.create(&pp, &cm("dry", &[])).await.expect("dry-run create");
    assert!(cms.get_opt("dry").await.expect("get").is_none());
    let dp = DeleteParams { dry_run: true, ..Default::default() };
    cms.delete("a", &dp).await.expect("dry-run delete");
    assert!(cms.get_opt("a").await.expect("get").is_some());

    // generateName.
    let mut g = cm("", &[]);
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let made = cms.create(&PostParams::default(), &g).await.expect("generateName");
    let n = made.metadata.name.expect("name");
    assert!(n.starts_with("gen-") && n.len() == 9, "{n}");

    cms.delete("a", &DeleteParams::default()).await.expect("delete");
    assert!(cms.get_opt("a").await.expect("get").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_and_status_subresource() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let deps: Api<Deployment> = Api::namespaced(client, "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}},
        "status": {"replicas": 7}
    }))
    .expect("deployment");
    let d = deps.create(&PostParams::default(), &d).await.expect("create");
    assert_eq!(d.metadata.generation, Some(1));
    assert!(d.status.as_ref().is_none_or(|s| s.replicas.is_none()), "status is reset on create");
    // Defaults as kube-apiserver applies them.
    let spec = d.spec.as_ref().expect("spec");
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(
        spec.template.spec.as_ref().expect("pod spec").containers[0].image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );

    let pp = PatchParams::default();
    let d = deps
        .patch("web", &pp, &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})))
        .await
        .expect("label");
    assert_eq!(d.metadata.generation, Some(1), "metadata changes keep generation");
    let d = deps
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"replicas": 9}})),
        )
        .await
        .expect("scale");
    assert_eq!(d.metadata.generation, Some(2), "spec changes bump generation");
    assert!(d.status.as_ref().is_none_or(|s| s.replicas.is_none()), "main endpoint ignores status");

    let d = deps.patch_status("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 5}, "status": {"replicas": 3, "observedGeneration": 2}}))).await.expect("status");
    assert_eq!(d.status.as_ref().and_then(|s| s.replicas), Some(3));
    assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(3), "status endpoint ignores spec");
    assert_eq!(d.metadata.generation, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_and_pagination() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..25 {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        cms.create(
            &PostParams::default(),
            &cm(&format!("c{i:02}"), &[("tier", tier), ("app", "x")]),
        )
        .await
        .expect("create");
    }
    let even = cms.list(&ListParams::default().labels("tier=even")).await.expect("list");
    assert_eq!(even.items.len(), 13);
    let set = cms.list(&ListParams::default().labels("tier in (odd),app")).await.expect("list");
    assert_eq!(set.items.len(), 12);
    let not =
        cms.list(&ListParams::default().labels("tier!=odd,!missing,app")).await.expect("list");
    assert_eq!(not.items.len(), 13);
    let by_name = cms.list(&ListParams::default().fields("metadata.name=c03")).await.expect("list");
    assert_eq!(by_name.items.len(), 1);
    let all: Api<ConfigMap> = Api::all(client.clone());
    let by_ns = all
        .list(&ListParams::default().fields("metadata.namespace=default,metadata.name!=c03"))
        .await
        .expect("list");
    assert_eq!(by_ns.items.len(), 25, "24 of ours and kube-root-ca.crt");
    let e = api_err(
        cms.list(&ListParams::default().fields("data.k=v")).await.expect_err("unsupported field"),
    );
    assert_eq!((e.code, e.message.as_str()), (400, "field label not supported: data.k"));

    // limit/continue.
    let mut names = vec![];
    let mut lp = ListParams::default().limit(10);
    let mut pages = 0;
    loop {
        let page = cms.list(&lp).await.expect("page");
        pages += 1;
        names.extend(page.items.iter().filter_map(|c| c.metadata.name.clone()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => {
                if pages == 1 {
                    assert_eq!(page.metadata.remaining_item_count, Some(16));
                }
                lp = lp.continue_token(&c)
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names.len(), 26, "25 of ours and kube-root-ca.crt");
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_watch_replays_from_resource_version_and_sends_410_when_too_old() {
    let sb = common::sandbox_with(ksync_sandbox::SandboxOptions {
        bookmark_interval: Duration::from_millis(200),
        ..Default::default()
    })
    .await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.expect("create");
    let rv = a.metadata.resource_version.clone().expect("rv");
    cms.create(&PostParams::default(), &cm("b", &[])).await.expect("create");
    cms.delete("a", &DeleteParams::default()).await.expect("delete");

    let wp = WatchParams::default().timeout(5);
    let evs: Vec<WatchEvent<ConfigMap>> =
        cms.watch(&wp, &rv).await.expect("watch").take(2).try_collect().await.expect("events");
    assert!(
        matches!(&evs[0], WatchEvent::Added(c) if c.metadata.name.as_deref() == Some("b")),
        "{evs:?}"
    );
    assert!(
        matches!(&evs[1], WatchEvent::Deleted(c) if c.metadata.name.as_deref() == Some("a")),
        "{evs:?}"
    );

    // Bookmarks when asked for.
    let wp = WatchParams::default().timeout(5);
    let mut s = cms.watch(&wp, "0").await.expect("watch").boxed();
    let got_bookmark = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(ev) = s.next().await {
            if let Ok(WatchEvent::Bookmark(b)) = ev {
                return b.metadata.resource_version;
            }
        }
        String::new()
    })
    .await
    .expect("bookmark in time");
    assert!(!got_bookmark.is_empty());

    sb.compact();
    let evs: Vec<WatchEvent<ConfigMap>> = cms
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .expect("watch")
        .take(1)
        .try_collect()
        .await
        .expect("events");
    match &evs[0] {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
            assert!(e.message.starts_with("too old resource version: "), "{}", e.message);
        }
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_over_10000_objects_survives_forced_410() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    const N: usize = 10_000;
    futures::stream::iter(0..N)
        .map(|i| {
            let cms = cms.clone();
            async move {
                cms.create(&PostParams::default(), &cm(&format!("o{i:05}"), &[])).await.map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .expect("create objects");

    let (reader, writer) = kube::runtime::reflector::store::<ConfigMap>();
    let rf = kube::runtime::reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().page_size(500)),
    );
    let task = tokio::spawn(rf.applied_objects().for_each(|_| async {}));
    common::wait_for("initial sync", Duration::from_secs(60), || {
        let n = reader.state().len();
        async move { (n == N + 1).then_some(()) }
    })
    .await;

    // Force every watch to expire: the watcher must relist and carry on.
    sb.compact();
    cms.create(&PostParams::default(), &cm("after-410", &[])).await.expect("create");
    cms.delete("o00000", &DeleteParams::default()).await.expect("delete");
    common::wait_for("post-410 changes", Duration::from_secs(60), || {
        let st = reader.state();
        let ok = st.len() == N + 1
            && st.iter().any(|c| c.metadata.name.as_deref() == Some("after-410"))
            && !st.iter().any(|c| c.metadata.name.as_deref() == Some("o00000"));
        async move { ok.then_some(()) }
    })
    .await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_gc_and_namespace_cascade() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "t1"}})).expect("ns"),
    )
    .await
    .expect("ns");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "t1");

    // Finalizers keep an object with deletionTimestamp until removed.
    let mut f = cm("fin", &[]);
    f.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &f).await.expect("create");
    cms.delete("fin", &DeleteParams::default()).await.expect("delete");
    let held = cms.get("fin").await.expect("still there");
    assert!(held.metadata.deletion_timestamp.is_some());
    let e = api_err(
        cms.patch(
            "fin",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "new"]}})),
        )
        .await
        .expect_err("no new finalizers"),
    );
    assert_eq!(e.code, 403);
    cms.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    assert!(cms.get_opt("fin").await.expect("get").is_none());

    // Owner references: background deletion removes dependents.
    let owner = cms.create(&PostParams::default(), &cm("owner", &[])).await.expect("owner");
    let uid = owner.metadata.uid.clone().expect("uid");
    for i in 0..3 {
        let mut d = cm(&format!("dep{i}"), &[]);
        d.metadata.owner_references = Some(vec![serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid, "blockOwnerDeletion": true})).expect("ref")]);
        cms.create(&PostParams::default(), &d).await.expect("dependent");
    }
    cms.delete("owner", &DeleteParams::background()).await.expect("delete owner");
    common::wait_for("dependents collected", Duration::from_secs(10), || {
        let cms = cms.clone();
        async move {
            cms.list(&ListParams::default())
                .await
                .ok()
                .filter(|l| {
                    l.items.iter().all(|c| c.metadata.name.as_deref() == Some("kube-root-ca.crt"))
                })
                .map(|_| ())
        }
    })
    .await;

    // Foreground: the owner waits (foregroundDeletion finalizer) until dependents are gone.
    let owner = cms.create(&PostParams::default(), &cm("fg", &[])).await.expect("owner");
    let uid = owner.metadata.uid.clone().expect("uid");
    let mut d = cm("fgdep", &[]);
    d.metadata.owner_references = Some(vec![
        serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "fg", "uid": uid}),
        )
        .expect("ref"),
    ]);
    cms.create(&PostParams::default(), &d).await.expect("dependent");
    cms.delete("fg", &DeleteParams::foreground()).await.expect("delete owner");
    common::wait_for("foreground done", Duration::from_secs(10), || {
        let cms = cms.clone();
        async move {
            cms.list(&ListParams::default())
                .await
                .ok()
                .filter(|l| {
                    l.items.iter().all(|c| c.metadata.name.as_deref() == Some("kube-root-ca.crt"))
                })
                .map(|_| ())
        }
    })
    .await;

    // Orphan: dependents stay, without the owner reference.
    let owner = cms.create(&PostParams::default(), &cm("orph", &[])).await.expect("owner");
    let uid = owner.metadata.uid.clone().expect("uid");
    let mut d = cm("orphdep", &[]);
    d.metadata.owner_references = Some(vec![
        serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "orph", "uid": uid}),
        )
        .expect("ref"),
    ]);
    cms.create(&PostParams::default(), &d).await.expect("dependent");
    cms.delete("orph", &DeleteParams::orphan()).await.expect("delete owner");
    common::wait_for("orphaned", Duration::from_secs(10), || {
        let cms = cms.clone();
        async move {
            let l = cms.list(&ListParams::default()).await.ok()?;
            (l.items.len() == 2
                && l.items
                    .iter()
                    .all(|c| c.metadata.owner_references.as_ref().is_none_or(|r| r.is_empty())))
            .then_some(())
        }
    })
    .await;

    // Namespace deletion cascades to its content, then the namespace goes away.
    nss.delete("t1", &DeleteParams::default()).await.expect("delete ns");
    common::wait_for("namespace gone", Duration::from_secs(10), || {
        let nss = nss.clone();
        async move { nss.get_opt("t1").await.ok().flatten().is_none().then_some(()) }
    })
    .await;
    let all: Api<ConfigMap> = Api::all(client);
    let left =
        all.list(&ListParams::default().fields("metadata.namespace=t1")).await.expect("list");
    assert!(left.items.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_injection_per_verb() {
    use ksync_sandbox::Fault;
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.create(&PostParams::default(), &cm("a", &[])).await.expect("create");

    // (kube-rs's default client retries 429/503/504 with back-off; 500 is returned at once.)
    sb.set_fault("get", Fault { error_rate: 1.0, error_code: 500, ..Default::default() });
    let e = api_err(cms.get("a").await.expect_err("injected"));
    assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    // Other verbs are untouched.
    assert_eq!(cms.list(&ListParams::default()).await.expect("list").items.len(), 2);

    sb.set_fault("get", Fault { reset_rate: 1.0, ..Default::default() });
    let e = cms.get("a").await.expect_err("reset");
    assert!(!matches!(e, kube::Error::Api(_)), "a transport error, got {e:?}");

    sb.set_fault("*", Fault { latency: Duration::from_millis(150), ..Default::default() });
    sb.set_fault("get", Fault::default());
    let t = std::time::Instant::now();
    cms.list(&ListParams::default()).await.expect("slow list");
    assert!(t.elapsed() >= Duration::from_millis(150));

    sb.clear_faults();
    cms.get("a").await.expect("served again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_namespaces_and_crds() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let sb = common::sandbox().await;
    let a = sb.create_namespace("test").await.expect("namespace");
    let b = sb.create_namespace("test").await.expect("namespace");
    assert!(a.starts_with("test-") && a != b);
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"kind": "Thing", "plural": "things"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .expect("crd");
    sb.install_crds(&[crd]).await.expect("install");
    let client = sb.client().await.expect("client");
    let disc = kube::Discovery::new(client).run().await.expect("discovery");
    assert!(disc.groups().any(|g| g.name() == "example.com"));

    // Deleting the CRD deletes its custom resources; their watchers see it.
    let client = sb.client().await.expect("client");
    let ar = kube::discovery::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Thing".into(),
        plural: "things".into(),
    };
    let things: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), &a, &ar);
    let t: kube::api::DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t1"}, "spec": {"x": 1}})).expect("thing");
    let made = things.create(&PostParams::default(), &t).await.expect("create thing");
    let rv = made.metadata.resource_version.clone().expect("rv");
    let mut w =
        things.watch(&WatchParams::default().timeout(10), &rv).await.expect("watch").boxed();
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    crds.delete("things.example.com", &DeleteParams::default()).await.expect("delete crd");
    let ev = tokio::time::timeout(Duration::from_secs(10), w.next()).await.expect("event in time");
    assert!(
        matches!(ev, Some(Ok(WatchEvent::Deleted(ref o))) if o.metadata.name.as_deref() == Some("t1")),
        "{ev:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_watch_sees_objects_leave_and_join() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let c = cms.create(&PostParams::default(), &cm("a", &[("tier", "web")])).await.expect("create");
    let rv = c.metadata.resource_version.clone().expect("rv");
    let wp = WatchParams::default().labels("tier=web").timeout(10);
    let mut s = cms.watch(&wp, &rv).await.expect("watch").boxed();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "db"}}})),
    )
    .await
    .expect("relabel");
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "web"}}})),
    )
    .await
    .expect("relabel");
    let mut seen = vec![];
    while seen.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(10), s.next()).await.expect("event in time")
        {
            Some(Ok(WatchEvent::Deleted(c))) => {
                seen.push(("DELETED", c.metadata.labels.and_then(|l| l.get("tier").cloned())))
            }
            Some(Ok(WatchEvent::Added(c))) => {
                seen.push(("ADDED", c.metadata.labels.and_then(|l| l.get("tier").cloned())))
            }
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    // The DELETED of an object that stops matching carries its last matching state (the cacher's
    // convertToWatchEvent), the ADDED its new state.
    assert_eq!(
        seen,
        vec![("DELETED", Some("web".to_string())), ("ADDED", Some("web".to_string()))]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_recorder_publishes_events_k8s_io() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let c = cms.create(&PostParams::default(), &cm("a", &[])).await.expect("create");
    let rec =
        Recorder::new(client.clone(), Reporter { controller: "ksync-test".into(), instance: None });
    let ev = Event {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("all good".into()),
        action: "Sync".into(),
        secondary: None,
    };
    let oref = kube::Resource::object_ref(&c, &());
    rec.publish(&ev, &oref).await.expect("publish");
    rec.publish(&ev, &oref).await.expect("publish again (series)");
    let evs: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "default");
    let l = evs.list(&ListParams::default()).await.expect("list");
    assert_eq!(l.items.len(), 1, "{:?}", l.items);
    assert_eq!(l.items[0].reason.as_deref(), Some("Synced"));
    let out = common::kubectl_ok(&sb, &["get", "events"]).await;
    assert!(
        out.contains("Synced") && out.contains("configmap/a") && out.contains("all good"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_watcher_gets_initial_events_end_bookmark() {
    let sb = common::sandbox().await;
    let client = sb.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    for i in 0..50 {
        cms.create(&PostParams::default(), &cm(&format!("s{i}"), &[])).await.expect("create");
    }
    let (reader, writer) = kube::runtime::reflector::store::<ConfigMap>();
    let rf = kube::runtime::reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().streaming_lists()),
    );
    let task = tokio::spawn(rf.applied_objects().for_each(|_| async {}));
    common::wait_for("streamed initial list", Duration::from_secs(20), || {
        let n = reader.state().len();
        async move { (n == 51).then_some(()) }
    })
    .await;
    cms.delete("s0", &DeleteParams::default()).await.expect("delete");
    common::wait_for("delete seen", Duration::from_secs(20), || {
        let n = reader.state().len();
        async move { (n == 50).then_some(()) }
    })
    .await;
    task.abort();
}
