//! What-ifs on the live cluster: the visibility API's what-if parameters (see
//! [`muster_api::visibility::whatif`]) read into changes of the latest forecast's snapshot,
//! and the changed cluster run forward on the same draws, so that what differs from the
//! latest forecast is the change's.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use muster_admission::Job;
use muster_api::GpuJob;
use muster_api::visibility::whatif as param;
use muster_sim::forecast::whatif::{Change, apply};
use muster_sim::forecast::{Forecast, Snapshot, WaitingJob};

use crate::index::Index;

use super::Latest;

/// The changes a what-if asks for.
#[derive(Clone, Debug, Default)]
pub struct WhatIf {
    /// In the order they apply.
    pub(crate) changes: Vec<Change>,
    /// Each change as a person reads it.
    pub(crate) described: Vec<String>,
}

impl WhatIf {
    /// Whether it changes nothing: the forecast as the cluster stands.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

/// Reads the what-if parameters of `query` (a URL query string; other parameters are left
/// alone). A job submitted is read as admission would read it from `index` at `now`.
/// Errors name the parameter and the form it takes.
pub fn parse(query: &str, index: &Index, now: i64) -> Result<WhatIf, String> {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let mut what = WhatIf::default();
    // The order changes apply in, whatever the order of the parameters.
    for wanted in [
        param::ADD_NODES,
        param::REMOVE_NODES,
        param::DRAIN,
        param::QUOTA,
        param::SUBMIT,
    ] {
        for (_, value) in pairs.iter().filter(|(k, _)| k == wanted) {
            let change = match wanted {
                param::ADD_NODES | param::REMOVE_NODES => nodes(wanted, value)?,
                param::DRAIN if !value.is_empty() => Change::Drain {
                    node: value.clone(),
                },
                param::DRAIN => return Err("drain: name a node (drain=NODE)".to_owned()),
                param::QUOTA => quota(value)?,
                _ => Change::Submit(submitted(value, index, now)?),
            };
            what.described.push(describe(&change));
            what.changes.push(change);
        }
    }
    Ok(what)
}

/// `FLAVOR:COUNT[:BLOCK]` of `addNodes` or `removeNodes`.
fn nodes(name: &str, value: &str) -> Result<Change, String> {
    let form = || format!("{name}: {value:?} is not FLAVOR:COUNT[:BLOCK]");
    let mut parts = value.splitn(3, ':');
    let flavor = parts.next().filter(|f| !f.is_empty()).ok_or_else(form)?;
    let count: u32 = parts
        .next()
        .and_then(|c| c.parse().ok())
        .filter(|c| *c > 0)
        .ok_or_else(form)?;
    let block = parts.next().filter(|b| !b.is_empty()).map(str::to_owned);
    let flavor = flavor.to_owned();
    Ok(if name == param::ADD_NODES {
        Change::AddNodes {
            flavor,
            count,
            block,
        }
    } else {
        Change::RemoveNodes {
            flavor,
            count,
            block,
        }
    })
}

/// `CLUSTERQUEUE:FLAVOR:RESOURCE:NOMINAL[:BORROWINGLIMIT]` of `quota`.
fn quota(value: &str) -> Result<Change, String> {
    let form =
        || format!("quota: {value:?} is not CLUSTERQUEUE:FLAVOR:RESOURCE:NOMINAL[:BORROWINGLIMIT]");
    let parts: Vec<&str> = value.split(':').collect();
    if !(4..=5).contains(&parts.len()) || parts[..3].iter().any(|p| p.is_empty()) {
        return Err(form());
    }
    let amount = |text: Option<&&str>| -> Result<Option<Quantity>, String> {
        match text.filter(|t| !t.is_empty()) {
            None => Ok(None),
            Some(t) => muster_api::Amount::parse(t)
                .map(|_| Some(Quantity((*t).to_owned())))
                .map_err(|e| format!("quota: {t:?} is not a quantity: {e}")),
        }
    };
    let nominal = amount(parts.get(3))?;
    let borrowing_limit = amount(parts.get(4))?;
    if nominal.is_none() && borrowing_limit.is_none() {
        return Err(format!(
            "quota: {value:?} changes nothing; give a nominal quota, a borrowing limit or both"
        ));
    }
    Ok(Change::Quota {
        cluster_queue: parts[0].to_owned(),
        flavor: parts[1].to_owned(),
        resource: parts[2].to_owned(),
        nominal,
        borrowing_limit,
    })
}

/// The GpuJob of `submit` (JSON), read as admission reads it, created at `now`.
fn submitted(json: &str, index: &Index, now: i64) -> Result<WaitingJob, String> {
    let mut gpujob: GpuJob =
        serde_json::from_str(json).map_err(|e| format!("submit: not a GpuJob as JSON: {e}"))?;
    let meta = &mut gpujob.metadata;
    if meta.namespace.as_deref().is_none_or(str::is_empty) {
        return Err("submit: the GpuJob names no namespace (metadata.namespace)".to_owned());
    }
    if meta.name.as_deref().is_none_or(str::is_empty) {
        meta.name = Some("what-if".to_owned());
    }
    meta.uid = Some(format!(
        "what-if/{}",
        meta.name.as_deref().unwrap_or_default()
    ));
    let mut job = Job::from_gpujob(&gpujob, |c| index.priority_classes.get(c).copied());
    if let Some(invalid) = job.invalid {
        return Err(format!("submit: {invalid}"));
    }
    job.created = now;
    let keys = super::history::keys(index, &gpujob);
    Ok(WaitingJob {
        job: std::sync::Arc::new(job),
        keys: keys.into(),
        queues_at: None,
        batch: None,
    })
}

/// `change` as a person reads it.
fn describe(change: &Change) -> String {
    let block = |b: &Option<String>| b.as_ref().map_or(String::new(), |b| format!(" in {b}"));
    let or_kept = |q: &Option<Quantity>| q.as_ref().map_or("kept".to_owned(), |q| q.0.clone());
    match change {
        Change::AddNodes {
            flavor,
            count,
            block: b,
        } => format!("{count} {flavor} nodes added{}", block(b)),
        Change::RemoveNodes {
            flavor,
            count,
            block: b,
        } => format!("{count} {flavor} nodes removed{}", block(b)),
        Change::Drain { node } => format!("node {node} drained"),
        Change::Quota {
            cluster_queue,
            flavor,
            resource,
            nominal,
            borrowing_limit,
        } => format!(
            "ClusterQueue {cluster_queue} {flavor} {resource}: nominal {}, borrowing limit {}",
            or_kept(nominal),
            or_kept(borrowing_limit)
        ),
        Change::Submit(w) => format!("{} submitted", w.job.id),
    }
}

/// `latest`'s snapshot with `what` applied, forecast as `latest` was (the same runtime model,
/// options, seed and margins). Errors: a change naming what the cluster lacks.
pub fn run(latest: &Latest, what: &WhatIf) -> Result<(Snapshot, Forecast), String> {
    let changed = apply(&latest.snapshot, &what.changes)?;
    let mut forecast = muster_sim::forecast::forecast(&changed, &latest.model, &latest.options)?;
    latest.calibration.apply(&mut forecast, &latest.late);
    Ok((changed, forecast))
}
