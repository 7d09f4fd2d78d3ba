//! List views shared by `status`, `get` and `events`: `-l` selects by label, `-w` keeps a watch
//! open after the list and prints each change as a new row (as `kubectl get -w` does), and
//! `-o json|yaml|wide|name` chooses the shape.
//!
//! The watch is kube's `watcher`: the first list it makes is the table, so the table and the
//! changes after it come from one consistent stream (no list-then-watch gap).

use std::fmt::Debug;

use anyhow::{Context, Result};
use futures::TryStreamExt;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Outcome;
use crate::output::{self, Format};

/// `-l` and `-w` of the list views.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ListArgs {
    /// Only objects whose labels match this selector, as kubectl's -l (such as
    /// `team=payments,tier!=db`).
    #[arg(short = 'l', long = "selector", value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// After the list, keep watching and print each change as a new row (Ctrl-C stops).
    #[arg(short = 'w', long)]
    pub watch: bool,
}

impl ListArgs {
    /// The list parameters for the selector.
    pub fn params(&self) -> ListParams {
        match &self.selector {
            Some(selector) => ListParams::default().labels(selector),
            None => ListParams::default(),
        }
    }
}

/// How one kind is shown: its `-o name` prefix, its table, and what to say when empty.
pub struct View<'a, K> {
    /// `application.sync.kuvryn.io` and the like.
    pub resource: &'a str,
    /// The table of `items` (with the header); `wide` adds columns.
    pub table: &'a dyn Fn(&[K], bool) -> String,
    /// The sentence printed for an empty list.
    pub empty: String,
}

impl<K> Debug for View<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View").field("resource", &self.resource).finish_non_exhaustive()
    }
}

/// Objects sorted by namespace, then name.
pub fn sorted<K: kube::Resource>(mut items: Vec<K>) -> Vec<K> {
    items.sort_by(|a, b| {
        (a.meta().namespace.as_deref(), a.meta().name.as_deref())
            .cmp(&(b.meta().namespace.as_deref(), b.meta().name.as_deref()))
    });
    items
}

/// `items` as `format` (`None`: the table); `header` false for the rows of a watch.
pub fn render<K>(
    items: &[K],
    format: Option<Format>,
    view: &View<'_, K>,
    header: bool,
) -> Result<String>
where
    K: kube::Resource + Serialize,
{
    match format {
        Some(f @ (Format::Json | Format::Yaml)) if header => output::structured(f, &items),
        Some(f @ (Format::Json | Format::Yaml)) => {
            items.iter().map(|item| output::structured(f, item)).collect()
        }
        Some(Format::Name) => Ok(output::names(
            view.resource,
            items.iter().map(|i| i.meta().name.clone().unwrap_or_default()),
        )),
        _ if items.is_empty() && header => Ok(format!("{}\n", view.empty)),
        wide => {
            let text = (view.table)(items, wide == Some(Format::Wide));
            Ok(if header { text } else { text.lines().skip(1).map(|l| format!("{l}\n")).collect() })
        }
    }
}

/// List `api` (or watch it with `-w`) and print the result as `format`.
pub async fn show<K>(
    api: Api<K>,
    list: &ListArgs,
    format: Option<Format>,
    view: &View<'_, K>,
) -> Result<Outcome>
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + Debug + Send + 'static,
{
    if !list.watch {
        let listed = api
            .list(&list.params())
            .await
            .with_context(|| format!("cannot list {}", view.resource))?;
        output::print(&render(&sorted(listed.items), format, view, true)?)?;
        return Ok(Outcome::Done);
    }
    let mut config = watcher::Config::default();
    if let Some(selector) = &list.selector {
        config = config.labels(selector);
    }
    let stream = watcher::watcher(api, config);
    let mut stream = std::pin::pin!(stream);
    let mut initial = Vec::new();
    while let Some(event) =
        stream.try_next().await.with_context(|| format!("cannot watch {}", view.resource))?
    {
        match event {
            watcher::Event::Init => initial.clear(),
            watcher::Event::InitApply(object) => initial.push(object),
            watcher::Event::InitDone => {
                let items = sorted(std::mem::take(&mut initial));
                output::print(&render(&items, format, view, true)?)?;
            }
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                output::print(&render(&[object], format, view, false)?)?;
            }
        }
    }
    Ok(Outcome::Done)
}
