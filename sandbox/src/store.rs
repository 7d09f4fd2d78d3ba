//! The in-memory object store: one global resourceVersion counter, a bounded event history for
//! watches (older versions answer `410 Gone`, like a compacted etcd), optimistic concurrency and
//! the metadata rules of the API conventions
//! (<https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md#metadata>).

use crate::builtin;
use crate::fields::{self, Who};
use crate::gc::{self, OwnerIndex, OwnerStep};
use crate::labelindex::LabelIndex;
use crate::resources::{self, ResourceInfo};
use crate::schema::Node;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult};
use base64::Engine;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{Notify, broadcast};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watches see it.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub store_key: String,
    pub ns: String,
    pub etype: EventType,
    pub obj: Arc<Value>,
    pub prev: Option<Arc<Value>>,
    /// `obj` as JSON, made by the first watch that sends it as stored and shared by the others.
    pub json: std::sync::OnceLock<bytes::Bytes>,
}

#[derive(Debug)]
pub struct State {
    pub rv: u64,
    /// Store key → object key → object; written only through [`State::put`], [`State::take`]
    /// and [`State::take_all`], which keep the garbage collector's owner index and the label
    /// index in step.
    pub objects: HashMap<String, BTreeMap<String, Arc<Value>>>,
    pub history: VecDeque<Arc<Event>>,
    pub history_limit: usize,
    /// Events at or below this version are gone from the history.
    pub compacted: u64,
    pub resources: Vec<ResourceInfo>,
    /// Owner references and what changed for the garbage collector, kept in step with
    /// `objects` by [`State::put`] and [`State::take`].
    owners: OwnerIndex,
    /// The objects carrying each label, kept in step the same way (labelled lists).
    labels: LabelIndex,
}

impl State {
    /// Store an object, keeping the owner and label indexes in step.
    fn put(&mut self, sk: &str, key: &str, obj: Arc<Value>) {
        let prev =
            self.objects.entry(sk.to_string()).or_default().insert(key.to_string(), obj.clone());
        self.owners.stored(sk, key, prev.as_deref(), &obj);
        self.labels.stored(sk, key, prev.as_deref(), &obj);
    }

    /// Remove an object, keeping the owner and label indexes in step.
    fn take(&mut self, sk: &str, key: &str) -> Option<Arc<Value>> {
        let gone = self.objects.get_mut(sk)?.remove(key)?;
        self.owners.removed(sk, &gone);
        self.labels.removed(sk, key, &gone);
        Some(gone)
    }

    /// Remove every object of a store key (its resource stopped being served).
    fn take_all(&mut self, sk: &str) -> Option<BTreeMap<String, Arc<Value>>> {
        let gone = self.objects.remove(sk)?;
        for o in gone.values() {
            self.owners.removed(sk, o);
        }
        self.labels.removed_all(sk);
        Some(gone)
    }

    /// The resource objects of a store key are handled as (its storage version).
    fn resource_for_store_key(&self, sk: &str) -> Option<ResourceInfo> {
        self.resources.iter().filter(|r| r.store_key() == sk).min_by_key(|r| !r.storage).cloned()
    }

    /// The stored object with this uid, with its resource.
    fn by_uid(&self, uid: &str) -> Option<(ResourceInfo, Arc<Value>)> {
        let (sk, key) = self.owners.locate(uid)?;
        let obj = self.objects.get(sk)?.get(key)?.clone();
        Some((self.resource_for_store_key(sk)?, obj))
    }
}

/// The store shared by the HTTP handlers, the garbage collector and the simulator.
#[derive(Debug)]
pub struct Store {
    state: Mutex<State>,
    tx: broadcast::Sender<Arc<Event>>,
    /// Woken after deletions and owner-reference writes.
    pub gc: Notify,
    /// Closes every open watch with `410 Gone` (forced compaction).
    pub expire_watches: broadcast::Sender<u64>,
    /// A resource that stopped being served (its CRD was deleted) after the event at this
    /// version: its open watches end, as kube-apiserver tears down the CRD's storage.
    pub closed_resources: broadcast::Sender<(String, u64)>,
    /// The cluster CA, published in every namespace as `kube-root-ca.crt`.
    pub ca_pem: std::sync::OnceLock<String>,
}

/// Options of one write request.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    pub dry_run: bool,
    pub field_manager: String,
    pub force: bool,
}

/// A write computed under the lock and committed later (after admission).
#[derive(Debug, Clone)]
pub struct Pending {
    pub ri: ResourceInfo,
    pub key: String,
    pub old: Option<Arc<Value>>,
    pub obj: Value,
    pub subresource: String,
}

/// (items, list resourceVersion, continue token, remainingItemCount).
pub type ListPage = (Vec<Arc<Value>>, u64, Option<String>, Option<usize>);
/// (replayed events, receiver for later ones, current resourceVersion).
pub type WatchStart = (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>, u64);

pub fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn obj_key(ns: &str, name: &str) -> String {
    if ns.is_empty() { name.to_string() } else { format!("{ns}/{name}") }
}

fn meta_str<'a>(o: &'a Value, f: &str) -> &'a str {
    o.get("metadata").and_then(|m| m.get(f)).and_then(Value::as_str).unwrap_or_default()
}

pub fn name_of(o: &Value) -> &str {
    meta_str(o, "name")
}

pub fn ns_of(o: &Value) -> &str {
    meta_str(o, "namespace")
}

pub fn rv_of(o: &Value) -> &str {
    meta_str(o, "resourceVersion")
}

fn random_suffix() -> String {
    // kube-apiserver's generateName alphabet (k8s.io/apimachinery/pkg/util/rand).
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let u = uuid::Uuid::new_v4();
    u.as_bytes()[..5].iter().map(|b| ALPHA[*b as usize % ALPHA.len()] as char).collect()
}

/// The schema node used for server-side apply and strategic merge.
pub fn schema_node(ri: &ResourceInfo) -> Node<'_> {
    if ri.custom {
        match &ri.schema {
            Some(s) => Node { s: Some(s), root: true },
            None => Node { s: None, root: true },
        }
    } else {
        Node::builtin(&ri.group, &ri.version, &ri.kind)
    }
}

/// What a change must touch to bump `metadata.generation` (the registry strategies'
/// PrepareForUpdate): everything but metadata and status; a Deployment's annotations too (they
/// are copied to its ReplicaSets); a custom resource's status too when it has no status
/// subresource.
fn strip_for_generation(ri: &ResourceInfo, o: &Value) -> Value {
    let mut c = o.clone();
    let annotations = o.pointer("/metadata/annotations").cloned();
    if let Some(m) = c.as_object_mut() {
        m.remove("metadata");
        if !ri.custom || ri.status {
            m.remove("status");
        }
        if ri.group == "apps" && ri.plural == "deployments" {
            m.insert("metadata".into(), json!({ "annotations": annotations }));
        }
    }
    c
}

/// The core objects kube-apiserver's built-in admission plugins read and write.
impl crate::builtin_admission::CoreObjects for Store {
    fn exists(&self, plural: &str, ns: &str, name: &str) -> bool {
        self.resource("", "v1", plural).is_some_and(|ri| self.get(&ri, ns, name).is_ok())
    }

    fn list(&self, plural: &str, ns: &str) -> Vec<Arc<Value>> {
        self.resource("", "v1", plural)
            .map(|ri| self.list_all(&ri.store_key(), Some(ns)))
            .unwrap_or_default()
    }

    fn write_status(&self, plural: &str, ns: &str, next: Value) {
        let Some(ri) = self.resource("", "v1", plural) else { return };
        let o = WriteOpts { field_manager: "kube-apiserver".into(), ..Default::default() };
        let name = name_of(&next).to_string();
        if let Ok(p) = self.prepare_update(&ri, ns, &name, next, "status", &o) {
            let _ = self.commit(p, false);
        }
    }
}

/// The metadata a status write of `obj` leaves on the object, when its registry strategy takes
/// any from the request; `None` keeps the stored metadata. The status strategies differ: a
/// custom resource's keeps only `status` (apiextensions-apiserver's status strategy copies the
/// old object), while a Deployment's resets only `spec` and `metadata.labels`
/// (`deploymentStatusStrategy.PrepareForUpdate`), which is how the deployment controller writes
/// the `deployment.kubernetes.io/revision` annotation with `UpdateStatus`. The fields no write
/// may change (name, uid, generation, resourceVersion, ...) were restored before.
fn status_write_metadata(ri: &ResourceInfo, old: &Value, obj: &Value) -> Option<Value> {
    if ri.custom || ri.group != "apps" || ri.plural != "deployments" {
        return None;
    }
    let mut metadata = obj.get("metadata").filter(|m| m.is_object())?.clone();
    match old.pointer("/metadata/labels") {
        Some(labels) => metadata["labels"] = labels.clone(),
        None => {
            if let Some(m) = metadata.as_object_mut() {
                m.remove("labels");
            }
        }
    }
    Some(metadata)
}

fn strip_times(o: &Value) -> Value {
    let mut c = o.clone();
    if let Some(mf) = c.pointer_mut("/metadata/managedFields").and_then(Value::as_array_mut) {
        for e in mf {
            if let Some(m) = e.as_object_mut() {
                m.remove("time");
            }
        }
    }
    c
}

pub const DEFAULT_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

impl Store {
    pub fn new(history_limit: usize) -> Arc<Self> {
        let (tx, _) = broadcast::channel(65536);
        let (expire, _) = broadcast::channel(16);
        let (closed, _) = broadcast::channel(64);
        let store = Arc::new(Store {
            state: Mutex::new(State {
                rv: 1,
                objects: HashMap::new(),
                history: VecDeque::new(),
                history_limit,
                compacted: 0,
                resources: resources::builtins(),
                owners: OwnerIndex::default(),
                labels: LabelIndex::default(),
            }),
            tx,
            gc: Notify::new(),
            expire_watches: expire,
            closed_resources: closed,
            ca_pem: std::sync::OnceLock::new(),
        });
        let ri = store.resource("", "v1", "namespaces").expect("namespaces resource");
        for ns in DEFAULT_NAMESPACES {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}});
            let opts = WriteOpts { field_manager: "kube-apiserver".into(), ..Default::default() };
            if let Ok(p) = store.prepare_create(&ri, "", obj, &opts) {
                let _ = store.commit(p, false);
            }
        }
        store.bootstrap_rbac();
        // The `kubernetes` Service every cluster has in `default`.
        if let Some(ri) = store.resource("", "v1", "services") {
            let svc = json!({"metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}], "sessionAffinity": "None", "type": "ClusterIP"}});
            let _ = store.create(&ri, "default", svc, "kube-apiserver");
        }
        store
    }

    /// The bootstrap ClusterRoles kube-apiserver creates that tests bind to
    /// (<https://kubernetes.io/docs/reference/access-authn-authz/rbac/#user-facing-roles>).
    fn bootstrap_rbac(&self) {
        let read = ["get", "list", "watch"];
        let write = ["create", "delete", "deletecollection", "patch", "update"];
        let core = [
            "configmaps",
            "endpoints",
            "persistentvolumeclaims",
            "pods",
            "pods/log",
            "pods/status",
            "replicationcontrollers",
            "services",
            "serviceaccounts",
            "events",
            "limitranges",
            "resourcequotas",
        ];
        let apps = [
            "deployments",
            "deployments/scale",
            "replicasets",
            "replicasets/scale",
            "statefulsets",
            "statefulsets/scale",
            "daemonsets",
            "controllerrevisions",
        ];
        let batch = ["jobs", "cronjobs"];
        let net = ["ingresses", "networkpolicies"];
        let rules = |verbs: &[&str]| {
            json!([
                {"apiGroups": [""], "resources": core, "verbs": verbs},
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": read},
                {"apiGroups": ["apps"], "resources": apps, "verbs": verbs},
                {"apiGroups": ["batch"], "resources": batch, "verbs": verbs},
                {"apiGroups": ["networking.k8s.io"], "resources": net, "verbs": verbs},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs},
            ])
        };
        let all: Vec<&str> = read.iter().chain(write.iter()).copied().collect();
        let mut edit = rules(&all);
        if let Some(a) = edit.as_array_mut() {
            a.push(json!({"apiGroups": [""], "resources": ["secrets"], "verbs": all}));
        }
        let mut admin = edit.clone();
        if let Some(a) = admin.as_array_mut() {
            a.push(json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": all}));
        }
        let objs = [
            (
                "clusterroles",
                json!({"metadata": {"name": "cluster-admin"}, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
            ),
            ("clusterroles", json!({"metadata": {"name": "admin"}, "rules": admin})),
            ("clusterroles", json!({"metadata": {"name": "edit"}, "rules": edit})),
            ("clusterroles", json!({"metadata": {"name": "view"}, "rules": rules(&read)})),
            (
                "clusterrolebindings",
                json!({"metadata": {"name": "cluster-admin"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}, "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]}),
            ),
        ];
        for (plural, mut obj) in objs {
            obj["metadata"]["labels"] = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
            obj["metadata"]["annotations"] =
                json!({"rbac.authorization.kubernetes.io/autoupdate": "true"});
            let Some(ri) = self.resource("rbac.authorization.k8s.io", "v1", plural) else {
                continue;
            };
            let opts = WriteOpts { field_manager: "kube-apiserver".into(), ..Default::default() };
            if let Ok(p) = self.prepare_create(&ri, "", obj, &opts) {
                let _ = self.commit(p, false);
            }
        }
    }

    /// Set the cluster CA and publish it (and the `default` ServiceAccount) in every namespace.
    pub fn set_ca(&self, pem: &str) {
        let _ = self.ca_pem.set(pem.to_string());
        if let Some(ri) = self.resource("", "v1", "namespaces") {
            for ns in self.list_all(&ri.store_key(), None) {
                self.namespace_defaults(name_of(&ns));
            }
        }
    }

    /// What kube-controller-manager adds to every new namespace: the `kube-root-ca.crt`
    /// ConfigMap (root-ca-cert-publisher) and the `default` ServiceAccount.
    fn namespace_defaults(&self, ns: &str) {
        let Some(ca) = self.ca_pem.get() else { return };
        if let Some(ri) = self.resource("", "v1", "configmaps") {
            let cm = json!({"metadata": {"name": "kube-root-ca.crt", "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}}, "data": {"ca.crt": ca}});
            let _ = self.create(&ri, ns, cm, "kube-controller-manager");
        }
        if let Some(ri) = self.resource("", "v1", "serviceaccounts") {
            let _ = self.create(
                &ri,
                ns,
                json!({"metadata": {"name": "default"}}),
                "kube-controller-manager",
            );
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn resources(&self) -> Vec<ResourceInfo> {
        self.lock().resources.clone()
    }

    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<ResourceInfo> {
        self.lock()
            .resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    pub fn get(&self, ri: &ResourceInfo, ns: &str, name: &str) -> ApiResult<Arc<Value>> {
        let st = self.lock();
        st.objects
            .get(&ri.store_key())
            .and_then(|m| m.get(&obj_key(ns, name)))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&ri.group, &ri.plural, name))
    }

    /// Every object of a resource (optionally in one namespace), in key order.
    pub fn list_all(&self, store_key: &str, ns: Option<&str>) -> Vec<Arc<Value>> {
        let st = self.lock();
        let Some(m) = st.objects.get(store_key) else {
            return vec![];
        };
        match ns {
            Some(ns) if !ns.is_empty() => {
                let prefix = format!("{ns}/");
                m.range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&prefix))
                    .map(|(_, v)| v.clone())
                    .collect()
            }
            _ => m.values().cloned().collect(),
        }
    }

    /// A list with selectors and `limit`/`continue` pagination
    /// (<https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks>).
    /// Every page of a paged list reads the same snapshot: the one at the first page's
    /// resourceVersion, rebuilt from the event history; `at` picks the first page's version.
    #[allow(clippy::too_many_arguments)]
    pub fn list(
        &self,
        ri: &ResourceInfo,
        ns: Option<&str>,
        labels: &LabelSelector,
        fieldsel: &FieldSelector,
        limit: Option<usize>,
        cont: Option<&str>,
        at: ReadAt,
    ) -> ApiResult<ListPage> {
        let st = self.lock();
        let (list_rv, start) = match cont {
            Some(c) if !c.is_empty() => {
                let (rv, start) = decode_continue(c)?;
                // -1: continue at the newest state (the token of a 410 answer).
                let rv = if rv < 0 { st.rv } else { rv as u64 };
                if rv < st.compacted {
                    return Err(continue_expired(&start));
                }
                (rv, start)
            }
            _ => match at {
                ReadAt::Latest => (st.rv, String::new()),
                ReadAt::Exact(rv) => {
                    if rv > st.rv {
                        return Err(too_large_rv(rv, st.rv));
                    }
                    if rv < st.compacted {
                        return Err(ApiError::gone(
                            "The resourceVersion for the provided list is too old.",
                        ));
                    }
                    (rv, String::new())
                }
            },
        };
        let sk = ri.store_key();
        let empty = BTreeMap::new();
        let m = st.objects.get(&sk).unwrap_or(&empty);
        // What changed since the snapshot: key -> its state then (None: absent then).
        let undo = Self::undo_since(&st, &sk, list_rv);
        let prefix = match ns {
            Some(ns) if !ns.is_empty() => format!("{ns}/"),
            _ => String::new(),
        };
        let from = if start.is_empty() { prefix.clone() } else { start.clone() };
        let mut out = vec![];
        let mut next = None;
        let mut remaining = 0usize;
        // The live objects to look at, in key order: those the label index says can match, or
        // every one. An object changed since the snapshot is looked at through `undo` either way.
        let live: Box<dyn Iterator<Item = (&String, &Arc<Value>)>> =
            match st.labels.candidates(&sk, labels, m.len()) {
                Some(keys) => {
                    let first = keys.partition_point(|k| *k < from.as_str());
                    let found: Vec<_> =
                        keys[first..].iter().filter_map(|k| m.get_key_value(*k)).collect();
                    Box::new(found.into_iter())
                }
                None => Box::new(m.range(from.clone()..)),
            };
        let mut cur = live.peekable();
        let mut old = undo.range(from..).peekable();
        loop {
            // Merge the live objects with the undone changes, in key order; the undo wins.
            let (k, v) = match (cur.peek(), old.peek()) {
                (None, None) => break,
                (Some((ck, _)), Some((ok, _))) if ok <= ck => {
                    if ok == ck {
                        cur.next();
                    }
                    let (k, v) = old.next().expect("peeked");
                    (k, v.as_ref())
                }
                (Some(_), _) => {
                    let (k, v) = cur.next().expect("peeked");
                    (k, Some(v))
                }
                (None, Some(_)) => {
                    let (k, v) = old.next().expect("peeked");
                    (k, v.as_ref())
                }
            };
            let Some(v) = v else { continue };
            if !k.starts_with(&prefix) {
                break;
            }
            if !start.is_empty() && *k == start {
                continue;
            }
            if !labels.matches(v) || !fieldsel.matches(v) {
                continue;
            }
            if let Some(l) = limit
                && out.len() >= l
            {
                if next.is_none() {
                    let last = out
                        .last()
                        .map(|o: &Arc<Value>| obj_key(ns_of(o), name_of(o)))
                        .unwrap_or_default();
                    next = Some(encode_continue(list_rv as i64, &last));
                }
                remaining += 1;
                continue;
            }
            out.push(v.clone());
        }
        let remaining = next.as_ref().map(|_| remaining).filter(|_| labels.is_empty());
        Ok((out, list_rv, next, remaining))
    }

    /// The objects of `sk` that changed after `rv`, each with its state at `rv` (`None`: it did
    /// not exist then), found by walking the event history back (events are in version order).
    fn undo_since(st: &State, sk: &str, rv: u64) -> BTreeMap<String, Option<Arc<Value>>> {
        let mut undo = BTreeMap::new();
        if rv >= st.rv {
            return undo;
        }
        let first = st.history.partition_point(|e| e.rv <= rv);
        for e in st.history.range(first..).rev() {
            if e.store_key == sk {
                undo.insert(obj_key(&e.ns, name_of(&e.obj)), e.prev.clone());
            }
        }
        undo
    }

    fn namespace_state(st: &State, ns: &str) -> Option<Arc<Value>> {
        st.objects.get("/namespaces").and_then(|m| m.get(ns)).cloned()
    }

    /// Validate and complete a create (kube-apiserver's BeforeCreate) without admission.
    pub fn prepare_create(
        &self,
        ri: &ResourceInfo,
        ns: &str,
        obj: Value,
        o: &WriteOpts,
    ) -> ApiResult<Pending> {
        let mut p = self.begin_create(ri, ns, obj, o)?;
        self.complete(&mut p)?;
        Ok(p)
    }

    /// The part of a create before mutating admission: the decoded, defaulted object as a
    /// mutating webhook sees it (no generated name, uid or creationTimestamp yet: kube-apiserver's
    /// registry `Store.create` assigns them after mutating admission).
    pub fn begin_create(
        &self,
        ri: &ResourceInfo,
        ns: &str,
        mut obj: Value,
        o: &WriteOpts,
    ) -> ApiResult<Pending> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body of the request was not a JSON object"));
        }
        obj["apiVersion"] = json!(ri.api_version());
        obj["kind"] = json!(ri.kind);
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        let body_ns = ns_of(&obj).to_string();
        if ri.namespaced {
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            obj["metadata"]["namespace"] = json!(ns);
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        // The NamespaceLifecycle admission plugin runs before the webhooks.
        self.check_namespace_open(ri, ns, name_of(&obj))?;
        let ts = now();
        // managedFields a create sends are kept (kube-apiserver decodes them like an update's).
        let client_mf: Vec<Value> = obj
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|e| e.get("manager").is_some())
            .cloned()
            .collect();
        {
            let m =
                obj["metadata"].as_object_mut().ok_or_else(|| ApiError::internal("metadata"))?;
            for f in [
                "uid",
                "creationTimestamp",
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
                "managedFields",
            ] {
                m.remove(f);
            }
            if ri.generation {
                m.insert("generation".into(), json!(1));
            } else {
                m.remove("generation");
            }
        }
        if !ri.custom {
            fields::drop_undeclared(&mut obj, schema_node(ri));
        }
        builtin::prepare_create(ri, &mut obj);
        builtin::apply_defaults(ri, &mut obj);
        if ri.custom {
            crate::crdvalid::default_and_prune(ri, &mut obj);
        }
        crate::webhookconfig::apply_defaults(ri, &mut obj);
        // The ServiceAccount and ResourceQuota admission plugins (Pods).
        crate::builtin_admission::admit_create(self, ri, ns, &mut obj, o.dry_run)?;
        let who = Who {
            manager: &o.field_manager,
            api_version: &ri.api_version(),
            subresource: "",
            now: &ts,
            custom: ri.custom,
        };
        let base =
            (!client_mf.is_empty()).then(|| json!({"metadata": {"managedFields": client_mf}}));
        fields::record_update(base.as_ref(), &mut obj, schema_node(ri), &who);
        let key = obj_key(if ri.namespaced { ns } else { "" }, name_of(&obj));
        Ok(Pending { ri: ri.clone(), key, old: None, obj, subresource: String::new() })
    }

    /// NamespaceLifecycle: no creates in a missing or terminating namespace.
    fn check_namespace_open(&self, ri: &ResourceInfo, ns: &str, name: &str) -> ApiResult<()> {
        if !ri.namespaced {
            return Ok(());
        }
        let st = self.lock();
        match Self::namespace_state(&st, ns) {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                Err(ApiError::forbidden(
                    &ri.group,
                    &ri.plural,
                    name,
                    &format!(
                        "unable to create new content in namespace {ns} because it is being terminated"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The part of a write after mutating admission and before validating admission
    /// (kube-apiserver's registry `BeforeCreate`/`BeforeUpdate`): a create gets its generated
    /// name, uid and creationTimestamp; custom resources are defaulted again, pruned and
    /// validated (schema and CEL); ObjectMeta and the kind's own rules are checked.
    pub fn complete(&self, p: &mut Pending) -> ApiResult<()> {
        let ri = p.ri.clone();
        match p.old.clone() {
            None => self.complete_create(&ri, p),
            Some(old) => complete_update(&ri, &old, &mut p.obj, &p.subresource),
        }
    }

    fn complete_create(&self, ri: &ResourceInfo, p: &mut Pending) -> ApiResult<()> {
        let obj = &mut p.obj;
        let ns = ns_of(obj).to_string();
        let mut name = name_of(obj).to_string();
        if name.is_empty()
            && let Some(g) = obj["metadata"]["generateName"].as_str().filter(|g| !g.is_empty())
        {
            name = format!("{g}{}", random_suffix());
            obj["metadata"]["name"] = json!(name);
        }
        if name.is_empty() {
            return Err(ApiError::invalid(
                &ri.group,
                &ri.kind,
                "",
                vec![(
                    "metadata.name".into(),
                    "FieldValueRequired".into(),
                    "Required value: name or generateName is required".into(),
                )],
            ));
        }
        if let Err(msg) = builtin::validate_name(ri, &name) {
            return Err(ApiError::invalid(
                &ri.group,
                &ri.kind,
                &name,
                vec![(
                    "metadata.name".into(),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: {name:?}: {msg}"),
                )],
            ));
        }
        self.check_namespace_open(ri, &ns, &name)?;
        let key = obj_key(if ri.namespaced { &ns } else { "" }, &name);
        if self.lock().objects.get(&ri.store_key()).is_some_and(|m| m.contains_key(&key)) {
            return Err(ApiError::already_exists(&ri.group, &ri.plural, &name));
        }
        p.key = key;
        let m = obj["metadata"].as_object_mut().ok_or_else(|| ApiError::internal("metadata"))?;
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(now()));
        validate_written(ri, obj, None)
    }

    /// A full replacement (PUT) of an object or of its status, without admission.
    pub fn prepare_update(
        &self,
        ri: &ResourceInfo,
        ns: &str,
        name: &str,
        obj: Value,
        sub: &str,
        o: &WriteOpts,
    ) -> ApiResult<Pending> {
        let mut p = self.begin_update(ri, ns, name, obj, sub, o)?;
        self.complete(&mut p)?;
        Ok(p)
    }

    /// The part of an update before mutating admission (see [`Store::complete`]).
    pub fn begin_update(
        &self,
        ri: &ResourceInfo,
        ns: &str,
        name: &str,
        mut obj: Value,
        sub: &str,
        o: &WriteOpts,
    ) -> ApiResult<Pending> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body of the request was not a JSON object"));
        }
        let body_name = name_of(&obj);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(
                "the name of the object (".to_string()
                    + body_name
                    + ") does not match the name on the URL ("
                    + name
                    + ")",
            ));
        }
        let old = self.get(ri, ns, name)?;
        let want_rv = rv_of(&obj);
        if !want_rv.is_empty() && want_rv != rv_of(&old) {
            return Err(ApiError::modified(&ri.group, &ri.plural, name));
        }
        let want_uid = meta_str(&obj, "uid");
        if !want_uid.is_empty() && want_uid != meta_str(&old, "uid") {
            return Err(ApiError::conflict(
                &ri.group,
                &ri.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {want_uid}, UID in object meta: {}",
                    meta_str(&old, "uid")
                ),
            ));
        }
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        self.finish_update(ri, old, obj, sub, o, None)
    }

    /// Shared tail of update and patch: keep immutable metadata, apply subresource rules,
    /// generation and managedFields.
    fn finish_update(
        &self,
        ri: &ResourceInfo,
        old: Arc<Value>,
        mut obj: Value,
        sub: &str,
        o: &WriteOpts,
        applied: Option<&Value>,
    ) -> ApiResult<Pending> {
        obj["apiVersion"] = json!(ri.api_version());
        obj["kind"] = json!(ri.kind);
        let ts = now();
        let mut client_mf: Option<Value> = None;
        {
            let om = old["metadata"].as_object().cloned().unwrap_or_default();
            let m = obj["metadata"]
                .as_object_mut()
                .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
            for f in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "resourceVersion",
            ] {
                match om.get(f) {
                    Some(v) => m.insert(f.into(), v.clone()),
                    None => m.remove(f),
                };
            }
            if applied.is_none() {
                // A client that changes managedFields replaces them (`[{}]` or `[]` resets them),
                // as kube-apiserver allows; otherwise the server's bookkeeping stands
                // (https://kubernetes.io/docs/reference/using-api/server-side-apply/#clearing-managedfields).
                let sent = m.get("managedFields").cloned();
                // A subresource write (status, scale) keeps the main resource's bookkeeping.
                match (sent, om.get("managedFields")) {
                    (Some(sent), old_mf) if Some(&sent) != old_mf && sub.is_empty() => {
                        let valid: Vec<Value> = sent
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter(|e| e.get("manager").is_some())
                            .cloned()
                            .collect();
                        client_mf = Some(Value::Array(valid));
                    }
                    _ => {}
                }
                match om.get("managedFields") {
                    Some(v) => m.insert("managedFields".into(), v.clone()),
                    None => m.remove("managedFields"),
                };
            }
            if old.pointer("/metadata/deletionTimestamp").is_some() {
                // Finalizers may only be removed once deletion started.
                let oldf: Vec<Value> =
                    om.get("finalizers").and_then(Value::as_array).cloned().unwrap_or_default();
                if let Some(nf) = m.get("finalizers").and_then(Value::as_array)
                    && nf.iter().any(|f| !oldf.contains(f))
                {
                    return Err(ApiError::forbidden(
                        &ri.group,
                        &ri.plural,
                        name_of(&old),
                        "no new finalizers can be added if the object is being deleted",
                    ));
                }
            }
        }
        if ri.status {
            if sub == "status" {
                // The status endpoint changes only status (api-conventions: spec and status),
                // and the metadata its strategy lets through (see `status_write_metadata`).
                let mut keep = (*old).clone();
                if let Some(metadata) = status_write_metadata(ri, &old, &obj) {
                    keep["metadata"] = metadata;
                }
                keep["status"] = obj.get("status").cloned().unwrap_or(Value::Null);
                if keep["status"].is_null()
                    && let Some(m) = keep.as_object_mut()
                {
                    m.remove("status");
                }
                keep["metadata"]["managedFields"] = obj["metadata"]["managedFields"].clone();
                if keep["metadata"]["managedFields"].is_null()
                    && let Some(m) = keep["metadata"].as_object_mut()
                {
                    m.remove("managedFields");
                }
                obj = keep;
            } else {
                match old.get("status") {
                    Some(s) => obj["status"] = s.clone(),
                    None => {
                        if let Some(m) = obj.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
        } else if sub == "status" {
            return Err(ApiError::path_not_found());
        }
        if !ri.custom {
            fields::drop_undeclared(&mut obj, schema_node(ri));
        }
        builtin::apply_defaults(ri, &mut obj);
        if ri.custom {
            crate::crdvalid::default_and_prune(ri, &mut obj);
        }
        crate::webhookconfig::apply_defaults(ri, &mut obj);
        let api_version = ri.api_version();
        let who = Who {
            manager: &o.field_manager,
            api_version: &api_version,
            subresource: sub,
            now: &ts,
            custom: ri.custom,
        };
        if applied.is_none() {
            match client_mf {
                Some(mf) => {
                    let mut base = (*old).clone();
                    base["metadata"]["managedFields"] = mf;
                    fields::record_update(Some(&base), &mut obj, schema_node(ri), &who);
                }
                None => fields::record_update(Some(&old), &mut obj, schema_node(ri), &who),
            }
        }
        let key = obj_key(ns_of(&old), name_of(&old));
        Ok(Pending { ri: ri.clone(), key, old: Some(old), obj, subresource: sub.to_string() })
    }

    /// JSON merge, JSON, strategic merge patch and server-side apply, without admission.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_patch(
        &self,
        ri: &ResourceInfo,
        ns: &str,
        name: &str,
        content_type: &str,
        body: &[u8],
        sub: &str,
        o: &WriteOpts,
    ) -> ApiResult<Pending> {
        let mut p = self.begin_patch(ri, ns, name, content_type, body, sub, o)?;
        self.complete(&mut p)?;
        Ok(p)
    }

    /// The part of a patch before mutating admission (see [`Store::complete`]); an apply may
    /// create.
    #[allow(clippy::too_many_arguments)]
    pub fn begin_patch(
        &self,
        ri: &ResourceInfo,
        ns: &str,
        name: &str,
        content_type: &str,
        body: &[u8],
        sub: &str,
        o: &WriteOpts,
    ) -> ApiResult<Pending> {
        let ct = content_type.split(';').next().unwrap_or_default().trim();
        if ct == "application/apply-patch+yaml" || ct == "application/apply-patch+cbor" {
            return self.prepare_apply(ri, ns, name, body, sub, o);
        }
        let old = self.get(ri, ns, name)?;
        let doc = self.patched(ri, &old, ct, body)?;
        let want_rv = rv_of(&doc);
        if !want_rv.is_empty() && want_rv != rv_of(&old) {
            return Err(ApiError::modified(&ri.group, &ri.plural, name));
        }
        let mut doc = doc;
        if !doc.get("metadata").is_some_and(Value::is_object) {
            doc["metadata"] = json!({});
        }
        self.finish_update(ri, old, doc, sub, o, None)
    }

    /// `old` with a JSON, merge or strategic merge patch applied.
    pub fn patched(
        &self,
        ri: &ResourceInfo,
        old: &Value,
        content_type: &str,
        body: &[u8],
    ) -> ApiResult<Value> {
        let ct = content_type.split(';').next().unwrap_or_default().trim();
        let mut doc = old.clone();
        match ct {
            "application/merge-patch+json" => {
                let p: Value = serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                json_patch::merge(&mut doc, &p);
            }
            "application/json-patch+json" => {
                let mut p: json_patch::Patch = serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                // kube-apiserver's JSON patch (evanphx/json-patch) lets `test` with a null value
                // pass when the member is missing from an existing object, as clients rely on
                // (kube-rs' finalizer helper tests `/metadata/finalizers` for null first).
                p.0.retain(|op| !missing_tested_as_null(&doc, op));
                json_patch::patch(&mut doc, &p).map_err(|e| ApiError {
                    code: 422,
                    reason: "Invalid",
                    message: e.to_string(),
                    details: None,
                })?;
            }
            "application/strategic-merge-patch+json" => {
                if ri.custom {
                    return Err(ApiError::unsupported_media_type(ct));
                }
                let p: Value = serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                doc = crate::smp::apply(&doc, &p, schema_node(ri));
            }
            other => return Err(ApiError::unsupported_media_type(other)),
        }
        Ok(doc)
    }

    fn prepare_apply(
        &self,
        ri: &ResourceInfo,
        ns: &str,
        name: &str,
        body: &[u8],
        sub: &str,
        o: &WriteOpts,
    ) -> ApiResult<Pending> {
        if o.field_manager.is_empty() {
            return Err(ApiError::bad_request(
                "PATCH, application/apply-patch+yaml requests require fieldManager to be set",
            ));
        }
        // JSON (what kube-rs and client-go send) is YAML; its own parser is much faster.
        let json_first = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        let applied: Value = match json_first.then(|| serde_json::from_slice(body).ok()).flatten() {
            Some(v) => v,
            None => crate::decode_yaml(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?,
        };
        if !applied.is_object() {
            return Err(ApiError::bad_request("the apply configuration must be an object"));
        }
        let api_version = ri.api_version();
        if applied["apiVersion"].as_str() != Some(api_version.as_str())
            || applied["kind"].as_str() != Some(ri.kind.as_str())
        {
            return Err(ApiError::bad_request(format!(
                "invalid object type: {}, Kind={}",
                applied["apiVersion"].as_str().unwrap_or_default(),
                applied["kind"].as_str().unwrap_or_default()
            )));
        }
        let aname = name_of(&applied);
        if !aname.is_empty() && aname != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({aname}) does not match the name on the URL ({name})"
            )));
        }
        // k8s.io/apiserver fieldmanager: an apply configuration carries no managedFields.
        if applied.pointer("/metadata/managedFields").is_some_and(|m| !m.is_null()) {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        // Built-in kinds: structured-merge-diff's typed conversion rejects undeclared fields.
        if !ri.custom {
            let undeclared = fields::undeclared_fields(&applied, schema_node(ri));
            if !undeclared.is_empty() {
                let what = if undeclared.len() == 1 {
                    format!("{}: field not declared in schema", undeclared[0])
                } else {
                    let lines: Vec<String> = undeclared
                        .iter()
                        .map(|f| format!("  {f}: field not declared in schema"))
                        .collect();
                    format!("errors:\n{}", lines.join("\n"))
                };
                return Err(ApiError::bad_request(format!(
                    "failed to create typed patch object ({}/{name}; {}/{}, Kind={}): {what}",
                    if ri.namespaced { ns } else { "" },
                    ri.group,
                    ri.version,
                    ri.kind
                )));
            }
        }
        let ts = now();
        let who = Who {
            manager: &o.field_manager,
            api_version: &api_version,
            subresource: sub,
            now: &ts,
            custom: ri.custom,
        };
        let node = schema_node(ri);
        let conflict = |message: String, causes: Vec<Value>| {
            let mut e = ApiError::conflict(&ri.group, &ri.plural, name, "");
            e.message = message;
            e.details = Some(json!({"causes": causes}));
            e
        };
        match self.get(ri, ns, name) {
            Err(e) if e.code == 404 => {
                if !sub.is_empty() {
                    return Err(e);
                }
                let uid = meta_str(&applied, "uid");
                if !uid.is_empty() {
                    return Err(ApiError::conflict(
                        &ri.group,
                        &ri.plural,
                        name,
                        &format!(
                            "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
                        ),
                    ));
                }
                let mut obj = fields::apply(None, &applied, node, &who, o.force, conflict)?;
                if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.insert("name".into(), json!(name));
                }
                let mf = obj.pointer("/metadata/managedFields").cloned();
                let mut p = self.begin_create(
                    ri,
                    ns,
                    obj,
                    &WriteOpts { field_manager: o.field_manager.clone(), ..o.clone() },
                )?;
                // The create recorded an Update; an apply-create is owned by the applier.
                if let Some(mf) = mf {
                    p.obj["metadata"]["managedFields"] = mf;
                }
                Ok(p)
            }
            Err(e) => Err(e),
            Ok(old) => {
                let mut obj = fields::apply(Some(&old), &applied, node, &who, o.force, conflict)?;
                let want_rv = rv_of(&applied);
                if !want_rv.is_empty() && want_rv != rv_of(&old) {
                    return Err(ApiError::modified(&ri.group, &ri.plural, name));
                }
                if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.insert("resourceVersion".into(), json!(rv_of(&old)));
                }
                self.finish_update(ri, old, obj, sub, o, Some(&applied))
            }
        }
    }

    /// Create `obj` in `ns` as `manager`.
    pub fn create(
        &self,
        ri: &ResourceInfo,
        ns: &str,
        obj: Value,
        manager: &str,
    ) -> ApiResult<Value> {
        let o = WriteOpts { field_manager: manager.to_string(), ..Default::default() };
        let p = self.prepare_create(ri, ns, obj, &o)?;
        self.commit(p, false)
    }

    /// Write a prepared change if the object did not change meanwhile (`Err` 409 otherwise).
    pub fn commit(&self, p: Pending, dry_run: bool) -> ApiResult<Value> {
        let mut st = self.lock();
        let sk = p.ri.store_key();
        let cur = st.objects.get(&sk).and_then(|m| m.get(&p.key)).cloned();
        match (&p.old, &cur) {
            (None, Some(_)) => {
                return Err(ApiError::already_exists(&p.ri.group, &p.ri.plural, name_of(&p.obj)));
            }
            (Some(_), None) => {
                return Err(ApiError::not_found(&p.ri.group, &p.ri.plural, name_of(&p.obj)));
            }
            (Some(o), Some(c)) if rv_of(o) != rv_of(c) => {
                return Err(ApiError::modified(&p.ri.group, &p.ri.plural, name_of(&p.obj)));
            }
            _ => {}
        }
        let mut obj = p.obj;
        if let Some(old) = &p.old {
            // A no-op write neither bumps resourceVersion nor notifies watchers.
            let mut cmp = obj.clone();
            cmp["metadata"]["resourceVersion"] = json!(rv_of(old));
            if strip_times(&cmp) == strip_times(old) {
                return Ok((**old).clone());
            }
        }
        if dry_run {
            if p.old.is_none()
                && let Some(m) = obj["metadata"].as_object_mut()
            {
                m.remove("resourceVersion");
            }
            return Ok(obj);
        }
        let deleting = obj.pointer("/metadata/deletionTimestamp").is_some()
            && obj
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_none_or(|f| f.is_empty())
            && !(p.ri.group.is_empty() && p.ri.plural == "namespaces");
        st.rv += 1;
        let rv = st.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let ns = ns_of(&obj).to_string();
        let arc = Arc::new(obj);
        let etype = if deleting {
            st.take(&sk, &p.key);
            EventType::Deleted
        } else {
            st.put(&sk, &p.key, arc.clone());
            if p.old.is_some() { EventType::Modified } else { EventType::Added }
        };
        if p.ri.group == "apiextensions.k8s.io" && p.ri.plural == "customresourcedefinitions" {
            Self::refresh_crds(&mut st);
        }
        Self::record(
            &mut st,
            &self.tx,
            Event {
                rv,
                store_key: sk,
                ns,
                etype,
                obj: arc.clone(),
                prev: p.old,
                json: Default::default(),
            },
        );
        drop(st);
        if etype == EventType::Added && p.ri.group.is_empty() && p.ri.plural == "namespaces" {
            self.namespace_defaults(name_of(&arc));
        }
        if deleting
            || arc.pointer("/metadata/ownerReferences").is_some()
            || arc.pointer("/metadata/deletionTimestamp").is_some()
        {
            self.gc.notify_one();
        }
        Ok((*arc).clone())
    }

    fn record(st: &mut State, tx: &broadcast::Sender<Arc<Event>>, ev: Event) {
        let ev = Arc::new(ev);
        st.history.push_back(ev.clone());
        while st.history.len() > st.history_limit {
            if let Some(e) = st.history.pop_front() {
                st.compacted = e.rv;
            }
        }
        let _ = tx.send(ev);
    }

    fn refresh_crds(st: &mut State) {
        let mut rs = resources::builtins();
        if let Some(crds) = st.objects.get("apiextensions.k8s.io/customresourcedefinitions") {
            for crd in crds.values() {
                rs.extend(resources::from_crd(crd));
            }
        }
        st.resources = rs;
    }

    /// Delete one object following finalizers and the propagation policy
    /// (<https://kubernetes.io/docs/concepts/architecture/garbage-collection/#cascading-deletion>).
    /// Returns the response body and whether the object is gone.
    pub fn delete(
        &self,
        ri: &ResourceInfo,
        ns: &str,
        name: &str,
        opts: &Value,
        dry_run: bool,
    ) -> ApiResult<(Value, bool)> {
        let old = self.get(ri, ns, name)?;
        if let Some(pre) = opts.get("preconditions") {
            if let Some(uid) = pre["uid"].as_str()
                && uid != meta_str(&old, "uid")
            {
                return Err(ApiError::conflict(
                    &ri.group,
                    &ri.plural,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(&old, "uid")
                    ),
                ));
            }
            if let Some(rv) = pre["resourceVersion"].as_str()
                && rv != rv_of(&old)
            {
                return Err(ApiError::conflict(
                    &ri.group,
                    &ri.plural,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        rv_of(&old)
                    ),
                ));
            }
        }
        let policy = opts["propagationPolicy"].as_str().map(str::to_string).unwrap_or_else(|| {
            match opts["orphanDependents"].as_bool() {
                Some(true) => "Orphan".into(),
                _ => "Background".into(),
            }
        });
        let mut obj = (*old).clone();
        let is_ns = ri.group.is_empty() && ri.plural == "namespaces";
        // NamespaceLifecycle admission: the system namespaces stay.
        if is_ns && matches!(name, "default" | "kube-system" | "kube-public") {
            return Err(ApiError::forbidden(
                "",
                "namespaces",
                name,
                "this namespace may not be deleted",
            ));
        }
        let mut finalizers: Vec<Value> = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let extra = match policy.as_str() {
            "Foreground" => Some("foregroundDeletion"),
            "Orphan" => Some("orphan"),
            _ => None,
        };
        let already = obj.pointer("/metadata/deletionTimestamp").is_some();
        if let Some(f) = extra
            && !finalizers.iter().any(|x| x == f)
            && (already
                || !finalizers.is_empty()
                || self.has_dependents(&old)
                || is_ns
                || f == "foregroundDeletion")
        {
            finalizers.push(json!(f));
        }
        if finalizers.is_empty() && !is_ns {
            if dry_run {
                return Ok((delete_response(ri, &old), true));
            }
            let mut st = self.lock();
            let sk = ri.store_key();
            let key = obj_key(ns_of(&old), name);
            let Some(cur) = st.take(&sk, &key) else {
                return Err(ApiError::not_found(&ri.group, &ri.plural, name));
            };
            st.rv += 1;
            let rv = st.rv;
            let mut gone = (*cur).clone();
            let mut removed_crs: Option<(String, BTreeMap<String, Arc<Value>>)> = None;
            let mut closed_sk = None;
            gone["metadata"]["resourceVersion"] = json!(rv.to_string());
            if ri.group == "apiextensions.k8s.io" && ri.plural == "customresourcedefinitions" {
                Self::refresh_crds(&mut st);
                // Deleting a CRD deletes its custom resources.
                let g = cur.pointer("/spec/group").and_then(Value::as_str).unwrap_or_default();
                let pl =
                    cur.pointer("/spec/names/plural").and_then(Value::as_str).unwrap_or_default();
                let sk_cr = format!("{g}/{pl}");
                closed_sk = Some(sk_cr.clone());
                if let Some(crs) = st.take_all(&sk_cr) {
                    removed_crs = Some((sk_cr, crs));
                }
            }
            let ev_ns = ns_of(&gone).to_string();
            let arc = Arc::new(gone);
            Self::record(
                &mut st,
                &self.tx,
                Event {
                    rv,
                    store_key: sk,
                    ns: ev_ns,
                    etype: EventType::Deleted,
                    obj: arc.clone(),
                    prev: Some(cur),
                    json: Default::default(),
                },
            );
            if let Some((sk_cr, crs)) = removed_crs {
                // Watchers of the custom resources see them go (after the CRD, in order).
                for (_, o) in crs {
                    st.rv += 1;
                    let r = st.rv;
                    let mut g2 = (*o).clone();
                    g2["metadata"]["resourceVersion"] = json!(r.to_string());
                    let ns = ns_of(&g2).to_string();
                    let ev = Event {
                        rv: r,
                        store_key: sk_cr.clone(),
                        ns,
                        etype: EventType::Deleted,
                        obj: Arc::new(g2),
                        prev: Some(o),
                        json: Default::default(),
                    };
                    Self::record(&mut st, &self.tx, ev);
                }
            }
            if let Some(sk_cr) = closed_sk {
                let _ = self.closed_resources.send((sk_cr, st.rv));
            }
            drop(st);
            self.gc.notify_one();
            return Ok((delete_response(ri, &arc), true));
        }
        // Graceful: mark for deletion and let finalizers (and the GC) finish it.
        if !already {
            obj["metadata"]["deletionTimestamp"] = json!(now());
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        }
        if !finalizers.is_empty() {
            obj["metadata"]["finalizers"] = json!(finalizers);
        }
        if is_ns {
            obj["status"]["phase"] = json!("Terminating");
        }
        if already && obj == *old {
            return Ok(((*old).clone(), false));
        }
        let key = obj_key(ns_of(&old), name);
        let p = Pending { ri: ri.clone(), key, old: Some(old), obj, subresource: String::new() };
        let v = self.commit(p, dry_run)?;
        self.gc.notify_one();
        Ok((v, false))
    }

    fn has_dependents(&self, owner: &Value) -> bool {
        self.lock().owners.has_dependents(meta_str(owner, "uid"))
    }

    /// Forget history up to now (like an etcd compaction) and end every open watch with 410.
    pub fn compact(&self) {
        let mut st = self.lock();
        st.history.clear();
        st.compacted = st.rv;
        let rv = st.rv;
        drop(st);
        let _ = self.expire_watches.send(rv);
    }

    /// Events after `rv` for a watch, plus a receiver for what follows; `Err` 410 when too old.
    pub fn watch_from(&self, rv: u64) -> ApiResult<WatchStart> {
        let st = self.lock();
        if rv < st.compacted {
            return Err(ApiError::gone(format!(
                "too old resource version: {rv} ({})",
                st.compacted + 1
            )));
        }
        let rx = self.tx.subscribe();
        let first = st.history.partition_point(|e| e.rv <= rv);
        let evs: Vec<Arc<Event>> = st.history.range(first..).cloned().collect();
        Ok((evs, rx, st.rv))
    }

    /// The objects of `store_key` (optionally in one namespace) now, a receiver for every later
    /// change and the version of that state, taken at once (the initial events of a watch).
    pub fn watch_state(
        &self,
        store_key: &str,
        ns: Option<&str>,
    ) -> (Vec<Arc<Value>>, broadcast::Receiver<Arc<Event>>, u64) {
        let st = self.lock();
        let rx = self.tx.subscribe();
        let objs = match st.objects.get(store_key) {
            None => vec![],
            Some(m) => match ns.filter(|n| !n.is_empty()) {
                Some(ns) => {
                    let prefix = format!("{ns}/");
                    m.range(prefix.clone()..)
                        .take_while(|(k, _)| k.starts_with(&prefix))
                        .map(|(_, v)| v.clone())
                        .collect()
                }
                None => m.values().cloned().collect(),
            },
        };
        (objs, rx, st.rv)
    }

    /// One pass of the garbage collector and the namespace controller over what changed since
    /// the last pass (see [`crate::gc`]). Returns whether it changed anything.
    pub fn gc_pass(&self) -> bool {
        self.gc_pass_counted().changed
    }

    /// [`Store::gc_pass`], also telling how many objects it looked at.
    fn gc_pass_counted(&self) -> GcPass {
        let (tasks, examined) = self.plan_gc();
        let opts =
            WriteOpts { field_manager: "kube-controller-manager".into(), ..Default::default() };
        let mut changed = false;
        let mut retry = vec![];
        for task in tasks {
            let ran = self.run_gc_task(&task, &opts);
            changed |= matches!(ran, Ran::Done | Ran::Partly);
            if matches!(ran, Ran::Partly | Ran::Failed) {
                retry.push(task.subject());
            }
        }
        if !retry.is_empty() {
            let mut st = self.lock();
            for subject in retry {
                match subject {
                    Subject::Object(uid) => st.owners.retry_object(&uid),
                    Subject::Namespace(name) => st.owners.retry_namespace(&name),
                }
            }
        }
        GcPass { changed, examined }
    }

    /// Decide, under the lock, what the collectors write for the objects and namespaces that
    /// changed since the last pass; also returns how many objects that looked at.
    fn plan_gc(&self) -> (Vec<GcTask>, usize) {
        let mut st = self.lock();
        let work = st.owners.take_work();
        let mut tasks = vec![];
        let mut examined = 0;
        for name in &work.namespaces {
            examined += Self::plan_namespace(&st, name, &mut tasks);
        }
        for uid in &work.objects {
            examined += Self::plan_object(&st, uid, &mut tasks);
        }
        (tasks, examined)
    }

    /// The namespace controller for one terminating namespace: delete its content, then drop
    /// the `kubernetes` finalizer and remove it. Returns how many objects it looked at.
    fn plan_namespace(st: &State, name: &str, tasks: &mut Vec<GcTask>) -> usize {
        let Some(ns) = st.objects.get(gc::NAMESPACES).and_then(|m| m.get(name)).cloned() else {
            return 0;
        };
        let Some(ri) = st.resource_for_store_key(gc::NAMESPACES) else { return 0 };
        if !gc::is_deleting(&ns) {
            return 1;
        }
        let prefix = format!("{name}/");
        let mut content = 0;
        for (sk, m) in &st.objects {
            let Some(r) = st.resource_for_store_key(sk).filter(|r| r.namespaced) else {
                continue;
            };
            for (_, o) in m.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)) {
                content += 1;
                if !gc::is_deleting(o) {
                    tasks.push(GcTask::Delete {
                        ri: r.clone(),
                        obj: o.clone(),
                        policy: "Background",
                        subject: Subject::Namespace(name.to_string()),
                    });
                }
            }
        }
        let spec_finalizers =
            ns.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
        if content == 0 && (spec_finalizers || gc::finalizers(&ns).is_empty()) {
            tasks.push(GcTask::FinishNamespace { ri, ns });
        }
        content + 1
    }

    /// The garbage collector for one object: its step as an owner being deleted, and whether
    /// it is a dependent whose owners are all gone. Returns how many objects it looked at.
    fn plan_object(st: &State, uid: &str, tasks: &mut Vec<GcTask>) -> usize {
        let Some((ri, obj)) = st.by_uid(uid) else { return 0 };
        let deleting = gc::is_deleting(&obj);
        let count = if deleting { st.owners.dependents_of(uid).count() } else { 0 };
        let dependents = || -> Vec<(ResourceInfo, Arc<Value>)> {
            st.owners.dependents_of(uid).filter_map(|d| st.by_uid(d)).collect()
        };
        match gc::owner_step(deleting, &gc::finalizers(&obj), count) {
            OwnerStep::Nothing => {}
            OwnerStep::OrphanDependents => tasks.push(GcTask::Orphan {
                ri: ri.clone(),
                owner: obj.clone(),
                dependents: dependents(),
            }),
            OwnerStep::DeleteDependents => {
                for (dri, d) in dependents().into_iter().filter(|(_, d)| !gc::is_deleting(d)) {
                    tasks.push(GcTask::Delete {
                        ri: dri,
                        obj: d,
                        policy: "Foreground",
                        subject: Subject::Object(uid.to_string()),
                    });
                }
            }
            OwnerStep::ReleaseForeground => {
                tasks.push(GcTask::ReleaseForeground { ri: ri.clone(), owner: obj.clone() })
            }
        }
        let present: Vec<bool> =
            gc::owner_uids(&obj).iter().map(|owner| st.owners.exists(owner)).collect();
        if gc::dependent_collectable(deleting, &present) {
            tasks.push(GcTask::Delete {
                ri,
                obj,
                policy: "Background",
                subject: Subject::Object(uid.to_string()),
            });
        }
        1 + count
    }

    /// Run one planned write; the objects it names may have changed since (then it fails and
    /// its subject is looked at again).
    fn run_gc_task(&self, task: &GcTask, opts: &WriteOpts) -> Ran {
        let done = |ok: bool| if ok { Ran::Done } else { Ran::Failed };
        match task {
            GcTask::Delete { ri, obj, policy, .. } => {
                // The uid precondition: never delete a newer object that took the name.
                let options = json!({"propagationPolicy": policy,
                    "preconditions": {"uid": meta_str(obj, "uid")}});
                done(self.delete(ri, ns_of(obj), name_of(obj), &options, false).is_ok())
            }
            GcTask::Orphan { ri, owner, dependents } => {
                let uid = meta_str(owner, "uid");
                let mut written = 0;
                for (dri, d) in dependents {
                    let mut nd = (**d).clone();
                    if let Some(refs) =
                        nd.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut)
                    {
                        refs.retain(|r| r["uid"] != uid);
                    }
                    written += usize::from(self.write_as_gc(dri, d, nd, opts));
                }
                if written < dependents.len() {
                    // The finalizer stays until every dependent is orphaned.
                    return if written > 0 { Ran::Partly } else { Ran::Failed };
                }
                done(self.drop_finalizer(ri, owner, "orphan", opts))
            }
            GcTask::ReleaseForeground { ri, owner } => {
                done(self.drop_finalizer(ri, owner, "foregroundDeletion", opts))
            }
            GcTask::FinishNamespace { ri, ns } => {
                let mut n = (**ns).clone();
                let spec_finalizers = n
                    .pointer("/spec/finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|f| !f.is_empty());
                if !spec_finalizers {
                    return done(self.remove_now(ri, ns));
                }
                n["spec"]["finalizers"] = json!([]);
                let p = Pending {
                    ri: ri.clone(),
                    key: name_of(ns).to_string(),
                    old: Some(ns.clone()),
                    obj: n,
                    subresource: "finalize".into(),
                };
                done(self.commit(p, false).is_ok())
            }
        }
    }

    fn write_as_gc(&self, ri: &ResourceInfo, old: &Arc<Value>, new: Value, o: &WriteOpts) -> bool {
        match self.finish_update(ri, old.clone(), new, "", o, None) {
            Ok(p) => self.commit(p, false).is_ok(),
            Err(_) => false,
        }
    }

    fn drop_finalizer(&self, ri: &ResourceInfo, o: &Arc<Value>, f: &str, opts: &WriteOpts) -> bool {
        let mut n = (**o).clone();
        if let Some(fs) = n.pointer_mut("/metadata/finalizers").and_then(Value::as_array_mut) {
            fs.retain(|x| x != f);
        }
        self.write_as_gc(ri, o, n, opts)
    }

    fn remove_now(&self, ri: &ResourceInfo, o: &Arc<Value>) -> bool {
        let mut st = self.lock();
        let sk = ri.store_key();
        let key = obj_key(ns_of(o), name_of(o));
        let Some(cur) = st.take(&sk, &key) else {
            return false;
        };
        st.rv += 1;
        let rv = st.rv;
        let mut gone = (*cur).clone();
        gone["metadata"]["resourceVersion"] = json!(rv.to_string());
        let ns = ns_of(&gone).to_string();
        Self::record(
            &mut st,
            &self.tx,
            Event {
                rv,
                store_key: sk,
                ns,
                etype: EventType::Deleted,
                obj: Arc::new(gone),
                prev: Some(cur),
                json: Default::default(),
            },
        );
        true
    }
}

/// What one collector pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GcPass {
    /// It wrote something.
    changed: bool,
    /// How many objects it looked at (the changed ones, their dependents, namespace content).
    examined: usize,
}

/// What a collector write is about: looked at again when the write fails.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Subject {
    /// An object, by uid.
    Object(String),
    /// A terminating namespace, by name.
    Namespace(String),
}

/// One write of the garbage collector or the namespace controller, planned under the store
/// lock and run after it is released (the writes take it again).
#[derive(Debug)]
enum GcTask {
    /// Delete an object with a propagation policy.
    Delete { ri: ResourceInfo, obj: Arc<Value>, policy: &'static str, subject: Subject },
    /// Remove the owner from each dependent's references, then drop its `orphan` finalizer.
    Orphan { ri: ResourceInfo, owner: Arc<Value>, dependents: Vec<(ResourceInfo, Arc<Value>)> },
    /// Drop the owner's `foregroundDeletion` finalizer: its dependents are gone.
    ReleaseForeground { ri: ResourceInfo, owner: Arc<Value> },
    /// Drop the namespace's `kubernetes` finalizer, or remove it when none is left.
    FinishNamespace { ri: ResourceInfo, ns: Arc<Value> },
}

impl GcTask {
    fn subject(&self) -> Subject {
        match self {
            GcTask::Delete { subject, .. } => subject.clone(),
            GcTask::Orphan { owner: o, .. } | GcTask::ReleaseForeground { owner: o, .. } => {
                Subject::Object(meta_str(o, "uid").to_string())
            }
            GcTask::FinishNamespace { ns, .. } => Subject::Namespace(name_of(ns).to_string()),
        }
    }
}

/// How a collector write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ran {
    Done,
    /// Some of its writes happened; the rest is retried.
    Partly,
    Failed,
}

/// Which state a list without `continue` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAt {
    /// The newest state.
    Latest,
    /// The state at exactly this resourceVersion (410 once compacted, 504 if in the future).
    Exact(u64),
}

/// A continue token: unpadded URL-safe base64 of `{"v":"meta.k8s.io/v1","rv":RV,"start":KEY}`,
/// the shape of kube-apiserver's (`k8s.io/apiserver/pkg/storage/continue.go`), opaque to clients.
fn encode_continue(rv: i64, start: &str) -> String {
    let tok = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tok.to_string())
}

/// `DecodeContinue`, its errors worded as the storage layer words them (400 BadRequest).
fn decode_continue(c: &str) -> ApiResult<(i64, String)> {
    let invalid = |why: &str| {
        ApiError::bad_request(format!("invalid continue token: continue key is not valid{why}"))
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(c.trim_end_matches('='))
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(c))
        .map_err(|e| invalid(&format!(": {e}")))?;
    let v: Value = serde_json::from_slice(&raw).map_err(|e| invalid(&format!(": {e}")))?;
    if v["v"] != "meta.k8s.io/v1" {
        return Err(invalid(": server does not recognize this encoded version"));
    }
    let rv = v["rv"].as_i64().unwrap_or(0);
    if rv == 0 {
        return Err(invalid(": incorrect encoded start resourceVersion (version meta.k8s.io/v1)"));
    }
    let start = v["start"].as_str().unwrap_or_default();
    if start.is_empty() {
        return Err(invalid(": encoded start key empty (version meta.k8s.io/v1)"));
    }
    Ok((rv, start.to_string()))
}

/// 410 for a continue token older than the history, with a token that continues the list at
/// the newest state (etcd3 store's `handleCompactedErrorForPaging`).
fn continue_expired(start: &str) -> ApiError {
    let mut e = ApiError::gone(
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
    );
    e.details = Some(json!({crate::status::LIST_CONTINUE: encode_continue(-1, start)}));
    e
}

/// 504 for a resourceVersion the store has not reached (`storage.NewTooLargeResourceVersionError`).
pub fn too_large_rv(rv: u64, current: u64) -> ApiError {
    ApiError {
        code: 504,
        reason: "Timeout",
        message: format!("Timeout: Too large resource version: {rv}, current: {current}"),
        details: Some(json!({
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1
        })),
    }
}

/// What DELETE answers when the object is gone: custom resources return the object, built-ins a
/// success Status (the generic registry's `ReturnDeletedObject`).
fn delete_response(ri: &ResourceInfo, obj: &Value) -> Value {
    if ri.custom {
        return obj.clone();
    }
    let mut details = json!({"name": name_of(obj), "kind": ri.plural, "uid": meta_str(obj, "uid")});
    if !ri.group.is_empty() {
        details["group"] = json!(ri.group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

/// A CRD's status as the apiextensions controllers set it: names accepted, Established.
fn crd_status(crd: &mut Value) {
    let ts = now();
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .map(|v| v["name"].clone())
        .collect();
    let mut accepted = names.clone();
    if accepted.get("singular").is_none()
        && let Some(k) = names["kind"].as_str()
    {
        accepted["singular"] = json!(k.to_lowercase());
    }
    if accepted.get("listKind").is_none()
        && let Some(k) = names["kind"].as_str()
    {
        accepted["listKind"] = json!(format!("{k}List"));
    }
    let established = crd
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
    if established {
        crd["status"]["acceptedNames"] = accepted;
        crd["status"]["storedVersions"] = json!(stored);
        return;
    }
    crd["status"] = json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": ts, "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": ts, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ],
        "storedVersions": stored,
    });
}

/// A `test` operation expecting null at a member that is missing from an existing parent: it
/// passes, so it is dropped before the patch is applied.
fn missing_tested_as_null(doc: &Value, op: &json_patch::PatchOperation) -> bool {
    let json_patch::PatchOperation::Test(test) = op else { return false };
    if !test.value.is_null() || doc.pointer(test.path.as_str()).is_some() {
        return false;
    }
    let path = test.path.as_str();
    let parent = path.rsplit_once('/').map_or("", |(parent, _)| parent);
    doc.pointer(parent).is_some_and(Value::is_object)
}

/// After mutating admission, an update: validated, and its generation bumped on a spec change.
/// A status write never bumps it (the status strategies' PrepareForUpdate leave it alone), even
/// when it changes metadata the main endpoint would count (a Deployment's annotations).
fn complete_update(ri: &ResourceInfo, old: &Value, obj: &mut Value, sub: &str) -> ApiResult<()> {
    validate_written(ri, obj, Some(old))?;
    if ri.generation
        && sub != "status"
        && strip_for_generation(ri, old) != strip_for_generation(ri, obj)
    {
        let g = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0) + 1;
        obj["metadata"]["generation"] = json!(g);
    }
    Ok(())
}

/// The checks every written object passes after mutating admission: the Namespace name
/// label (kube-apiserver's namespace strategy sets it on create and update), CRD defaulting,
/// pruning and validation, ObjectMeta rules and webhook configuration rules.
fn validate_written(ri: &ResourceInfo, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    if ri.group.is_empty() && ri.plural == "namespaces" {
        let name = name_of(obj).to_string();
        if !obj["metadata"]["labels"].is_object() {
            obj["metadata"]["labels"] = json!({});
        }
        obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
    }
    if ri.custom {
        crate::crdvalid::validate(ri, obj, old)?;
    }
    let mut causes = crate::metavalid::validate_object_meta(&obj["metadata"]);
    causes.extend(crate::webhookconfig::validate(ri, obj));
    if !causes.is_empty() {
        let name = name_of(obj).to_string();
        let qualified =
            if ri.group.is_empty() { ri.kind.clone() } else { format!("{}.{}", ri.kind, ri.group) };
        let mut e = ApiError::invalid(&ri.group, &qualified, &name, causes);
        if let Some(d) = e.details.as_mut() {
            d["kind"] = json!(ri.kind);
        }
        return Err(e);
    }
    if ri.group == "apiextensions.k8s.io" && ri.plural == "customresourcedefinitions" {
        crd_status(obj);
    }
    Ok(())
}

#[cfg(test)]
mod gc_cost_tests {
    use super::*;
    use std::time::{Duration, Instant};

    const FILLER: usize = 20_000;
    const DEPENDENTS: usize = 3;

    fn configmap(name: &str, owner_uid: Option<&str>) -> Value {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        if let Some(uid) = owner_uid {
            cm["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]);
        }
        cm
    }

    /// One owner with 3 dependents deleted among 20,000 unrelated ConfigMaps: collecting them
    /// must cost O(dependents), so it finishes well inside a deadline an O(objects) pass misses.
    #[test]
    fn collecting_after_one_deletion_costs_dependents_not_objects() {
        let store = Store::new(FILLER * 2);
        let cm = store.resource("", "v1", "configmaps").expect("configmaps");
        for i in 0..FILLER {
            store
                .create(&cm, "default", configmap(&format!("filler-{i}"), None), "t")
                .expect("filler");
        }
        let owner = store.create(&cm, "default", configmap("owner", None), "t").expect("owner");
        let uid = owner["metadata"]["uid"].as_str().expect("uid").to_string();
        for d in 0..DEPENDENTS {
            store
                .create(&cm, "default", configmap(&format!("dep-{d}"), Some(&uid)), "t")
                .expect("dependent");
        }
        while store.gc_pass() {}

        let start = Instant::now();
        store.delete(&cm, "default", "owner", &json!({}), false).expect("delete owner");
        let mut passes = 0;
        let mut examined = 0;
        loop {
            let pass = store.gc_pass_counted();
            passes += 1;
            examined += pass.examined;
            if !pass.changed {
                break;
            }
        }
        let elapsed = start.elapsed();

        for d in 0..DEPENDENTS {
            assert!(store.get(&cm, "default", &format!("dep-{d}")).is_err(), "dep-{d} collected");
        }
        assert!(store.get(&cm, "default", "filler-0").is_ok(), "unrelated objects stay");
        println!(
            "{}",
            json!({"measurement": "gc_after_one_deletion", "objects": FILLER,
                "dependents": DEPENDENTS, "passes": passes, "examined": examined,
                "micros": elapsed.as_micros() as u64})
        );
        // Each pass looks at the deleted owner's dependents (and their own dependents), not at
        // the 20,000 unrelated objects.
        assert!(examined <= 4 * DEPENDENTS, "examined {examined} objects in {passes} passes");
        let deadline = Duration::from_millis(20);
        assert!(elapsed < deadline, "collection took {elapsed:?}, more than {deadline:?}");
    }
}

#[cfg(test)]
mod label_index_tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn configmap(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}})
    }

    fn names(items: &[Arc<Value>]) -> Vec<String> {
        items.iter().map(|o| obj_key(ns_of(o), name_of(o))).collect()
    }

    fn selector(s: &str) -> LabelSelector {
        LabelSelector::parse(s).expect("selector")
    }

    /// `list` with `sel`, against every object of the same snapshot filtered by hand.
    fn check(store: &Store, ri: &ResourceInfo, ns: Option<&str>, sel: &str, at: ReadAt) {
        let every = FieldSelector::default();
        let none = LabelSelector::default();
        let (all, rv_all, ..) = store.list(ri, ns, &none, &every, None, None, at).expect("all");
        let want: Vec<String> =
            names(&all.into_iter().filter(|o| selector(sel).matches(o)).collect::<Vec<_>>());
        let (got, rv, ..) =
            store.list(ri, ns, &selector(sel), &every, None, None, at).expect("selected");
        assert_eq!(rv, rv_all);
        assert_eq!(names(&got), want, "selector {sel:?} in {ns:?} at {at:?}");
        // The same answer page by page.
        let mut paged = vec![];
        let mut cont: Option<String> = None;
        loop {
            let (page, _, next, _) = store
                .list(ri, ns, &selector(sel), &every, Some(2), cont.as_deref(), at)
                .expect("page");
            paged.extend(names(&page));
            match next {
                Some(c) => cont = Some(c),
                None => break,
            }
        }
        assert_eq!(paged, want, "paged, selector {sel:?} in {ns:?} at {at:?}");
    }

    const SELECTORS: &[&str] = &[
        "app=a",
        "app==b",
        "app in (a,c)",
        "app,tier=web",
        "tier",
        "app=a,tier!=web",
        "app notin (a)",
        "!tier",
        "app=none",
        "",
    ];

    fn check_all(store: &Store, ri: &ResourceInfo, at: ReadAt) {
        for ns in [None, Some("default"), Some("other")] {
            for sel in SELECTORS {
                check(store, ri, ns, sel, at);
            }
        }
    }

    #[test]
    fn labelled_lists_match_a_full_scan_now_and_at_older_versions() {
        let store = Store::new(10_000);
        let cm = store.resource("", "v1", "configmaps").expect("configmaps");
        store.create(&cm, "other", json!({"metadata": {"name": "other"}}), "t").ok();
        if let Some(ns) = store.resource("", "v1", "namespaces") {
            store.create(&ns, "", json!({"metadata": {"name": "other"}}), "t").expect("ns");
        }
        let apps = ["a", "b", "c"];
        for i in 0..12 {
            for ns in ["default", "other"] {
                let mut labels = json!({"app": apps[i % 3]});
                if i % 2 == 0 {
                    labels["tier"] = json!("web");
                }
                store.create(&cm, ns, configmap(&format!("cm-{i:02}"), labels), "t").expect("cm");
            }
        }
        check_all(&store, &cm, ReadAt::Latest);
        let before = store.current_rv();

        // Labels change (update and merge patch), objects go and come.
        let o = store.get(&cm, "default", "cm-00").expect("cm-00");
        let mut changed = (*o).clone();
        changed["metadata"]["labels"] = json!({"app": "b"});
        let p = store
            .prepare_update(&cm, "default", "cm-00", changed, "", &WriteOpts::default())
            .expect("update");
        store.commit(p, false).expect("commit update");
        let body = br#"{"metadata": {"labels": {"app": null, "tier": "web"}}}"#;
        let opts = WriteOpts { field_manager: "t".into(), ..Default::default() };
        let p = store
            .prepare_patch(&cm, "other", "cm-01", "application/merge-patch+json", body, "", &opts)
            .expect("patch");
        store.commit(p, false).expect("commit patch");
        store.delete(&cm, "default", "cm-03", &json!({}), false).expect("delete");
        store.create(&cm, "default", configmap("cm-03", json!({"app": "c"})), "t").expect("again");
        store.create(&cm, "default", configmap("cm-99", json!({"app": "a"})), "t").expect("new");

        check_all(&store, &cm, ReadAt::Latest);
        check_all(&store, &cm, ReadAt::Exact(before));
        let every = FieldSelector::default();
        let (now_a, ..) = store
            .list(&cm, Some("default"), &selector("app=a"), &every, None, None, ReadAt::Latest)
            .expect("now");
        assert!(!names(&now_a).contains(&"default/cm-00".to_string()), "moved to app=b");
        assert!(names(&now_a).contains(&"default/cm-99".to_string()), "created with app=a");
        let (then_a, ..) = store
            .list(
                &cm,
                Some("default"),
                &selector("app=a"),
                &every,
                None,
                None,
                ReadAt::Exact(before),
            )
            .expect("then");
        assert!(names(&then_a).contains(&"default/cm-00".to_string()), "app=a at the snapshot");
        assert!(!names(&then_a).contains(&"default/cm-99".to_string()), "not created yet then");
    }

    /// The scale benchmark's shape: N Applications, each listing its objects by its label among
    /// the 4 × N objects of the namespace. With the index a list looks at the Application's own
    /// objects only, so 1,000 lists among 20,000 objects finish well inside a deadline that
    /// scans of every object (20 million label lookups) miss by far.
    #[test]
    fn a_labelled_list_costs_its_matches_not_the_objects_of_its_kind() {
        const OBJECTS: usize = 20_000;
        const LISTS: usize = 1_000;
        let store = Store::new(OBJECTS * 2);
        let cm = store.resource("", "v1", "configmaps").expect("configmaps");
        for i in 0..OBJECTS {
            let labels = json!({"sync.kuvryn.io/application": format!("app-{:04}", i / 4)});
            store
                .create(&cm, "default", configmap(&format!("cm-{i:05}"), labels), "t")
                .expect("cm");
        }
        let every = FieldSelector::default();
        let start = Instant::now();
        for n in 0..LISTS {
            let sel = selector(&format!("sync.kuvryn.io/application=app-{n:04}"));
            let (items, ..) = store
                .list(&cm, Some("default"), &sel, &every, None, None, ReadAt::Latest)
                .expect("list");
            assert_eq!(items.len(), 4, "app-{n:04}");
        }
        let elapsed = start.elapsed();
        println!(
            "{}",
            json!({"measurement": "labelled_lists", "objects": OBJECTS, "lists": LISTS,
                "micros_per_list": elapsed.as_micros() as u64 / LISTS as u64})
        );
        let deadline = Duration::from_secs(2);
        assert!(elapsed < deadline, "{LISTS} labelled lists took {elapsed:?}, over {deadline:?}");
    }
}

#[cfg(test)]
mod generation_tests {
    //! When `metadata.generation` moves, as kube-apiserver's registry strategies decide it.
    use super::*;

    fn opts() -> WriteOpts {
        WriteOpts { field_manager: "t".into(), ..Default::default() }
    }

    fn update(store: &Store, ri: &ResourceInfo, obj: Value, sub: &str) -> Value {
        let name = name_of(&obj).to_string();
        let p = store.prepare_update(ri, "default", &name, obj, sub, &opts()).expect("update");
        store.commit(p, false).expect("commit")
    }

    fn generation(o: &Value) -> i64 {
        o.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or_default()
    }

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    }

    const REVISION: &str = "deployment.kubernetes.io/revision";

    /// The deployment controller's `UpdateStatus` with the revision annotation: annotation and
    /// status stored, labels and spec from the request ignored, generation unchanged.
    #[test]
    fn deployment_status_write_keeps_annotations_without_a_new_generation() {
        let store = Store::new(100);
        let ri = store.resource("apps", "v1", "deployments").expect("deployments");
        let made = store.create(&ri, "default", deployment(), "t").expect("create");
        assert_eq!(generation(&made), 1);
        let mut next = made.clone();
        next["metadata"]["annotations"] = json!({REVISION: "1"});
        next["metadata"]["labels"] = json!({"app": "other"});
        next["spec"]["replicas"] = json!(7);
        next["status"] = json!({"observedGeneration": 1, "replicas": 1});
        let written = update(&store, &ri, next, "status");
        assert_eq!(written["metadata"]["annotations"][REVISION], "1");
        assert_eq!(written["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(written["spec"]["replicas"], made["spec"]["replicas"]);
        assert_eq!(written["status"]["replicas"], 1);
        assert_eq!(generation(&written), 1);
    }

    /// Through the main endpoint a Deployment's annotations count like its spec (they are copied
    /// to its ReplicaSets): a new generation; its status is not written there.
    #[test]
    fn deployment_annotation_update_bumps_generation_and_ignores_status() {
        let store = Store::new(100);
        let ri = store.resource("apps", "v1", "deployments").expect("deployments");
        let made = store.create(&ri, "default", deployment(), "t").expect("create");
        let mut next = made.clone();
        next["metadata"]["annotations"] = json!({"team": "a"});
        next["status"] = json!({"replicas": 3});
        let written = update(&store, &ri, next, "");
        assert_eq!(generation(&written), 2);
        assert_eq!(written.get("status"), made.get("status"));
        // Labels are not copied that way: no new generation.
        let mut next = written.clone();
        next["metadata"]["labels"]["tier"] = json!("front");
        assert_eq!(generation(&update(&store, &ri, next, "")), 2);
    }

    /// Other built-ins with a status subresource: spec changes only.
    #[test]
    fn replicaset_metadata_update_keeps_generation_spec_update_bumps_it() {
        let store = Store::new(100);
        let ri = store.resource("apps", "v1", "replicasets").expect("replicasets");
        let mut rs = deployment();
        rs["kind"] = json!("ReplicaSet");
        let made = store.create(&ri, "default", rs, "t").expect("create");
        let mut next = made.clone();
        next["metadata"]["annotations"] = json!({REVISION: "1"});
        let written = update(&store, &ri, next, "");
        assert_eq!(generation(&written), 1);
        let mut next = written.clone();
        next["spec"]["replicas"] = json!(4);
        assert_eq!(generation(&update(&store, &ri, next, "")), 2);
    }

    fn crd(status_subresource: bool) -> Value {
        let mut version = json!({"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}});
        if status_subresource {
            version["subresources"] = json!({"status": {}});
        }
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [version]}})
    }

    fn widgets(status_subresource: bool) -> (Arc<Store>, ResourceInfo, Value) {
        let store = Store::new(100);
        let crds = store
            .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .expect("crds");
        store.create(&crds, "", crd(status_subresource), "t").expect("crd");
        let ri = store.resource("example.com", "v1", "widgets").expect("widgets served");
        let w = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {"size": 1}});
        let made = store.create(&ri, "default", w, "t").expect("create");
        (store, ri, made)
    }

    /// A custom resource with the status subresource: metadata and status writes keep the
    /// generation, a spec change bumps it; `/status` takes nothing but status.
    #[test]
    fn custom_resource_with_status_subresource_bumps_on_spec_only() {
        let (store, ri, made) = widgets(true);
        assert_eq!(generation(&made), 1);
        let mut next = made.clone();
        next["metadata"]["annotations"] = json!({"a": "b"});
        let written = update(&store, &ri, next, "");
        assert_eq!(generation(&written), 1);
        let mut next = written.clone();
        next["status"] = json!({"phase": "Ready"});
        next["metadata"]["annotations"] = json!({"a": "c"});
        next["spec"]["size"] = json!(9);
        let written = update(&store, &ri, next, "status");
        assert_eq!(generation(&written), 1);
        assert_eq!(written["status"]["phase"], "Ready");
        assert_eq!(written["metadata"]["annotations"]["a"], "b");
        assert_eq!(written["spec"]["size"], 1);
        let mut next = written.clone();
        next["spec"]["size"] = json!(2);
        assert_eq!(generation(&update(&store, &ri, next, "")), 2);
    }

    /// Without the status subresource, status is part of the main resource and counts.
    #[test]
    fn custom_resource_without_status_subresource_bumps_on_status_too() {
        let (store, ri, made) = widgets(false);
        let mut next = made.clone();
        next["status"] = json!({"phase": "Ready"});
        assert_eq!(generation(&update(&store, &ri, next, "")), 2);
    }
}
