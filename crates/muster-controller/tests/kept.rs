//! The scheduler a pass keeps for the next one decides what one built afresh from the index
//! would: pass after pass, through admissions, gangs that start and finish, jobs that arrive
//! or are deleted while waiting, and other teams' pods that come and go on the nodes.

mod support;

use k8s_openapi::api::core::v1::Pod;
use muster_api::GpuJob;
use muster_api::gpujob::GpuJobPhase;
use muster_controller::plan::{Action, Summary, plan};
use serde_json::json;
use support::{at, cluster, job, land_all, object, with_phase};

/// A pod of another team on `node`, using `gpus` GPUs.
fn outside_pod(name: &str, node: &str, gpus: u32) -> Pod {
    object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "other", "uid": format!("uid-{name}"),
                     "resourceVersion": "1"},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "server:1",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Running"}
    }))
}

/// A small deterministic generator (the test's script must not change between runs).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// What a pass found is what the pass over a fresh copy found; only how much each had to
/// look at differs.
fn assert_same_findings(pass: &Summary, built: &Summary, t: i64) {
    let same = |s: &Summary| Summary {
        scheduler_rebuilt: false,
        settled: 0,
        explained: false,
        ..s.clone()
    };
    assert_eq!(same(pass), same(built), "pass at {t}");
}

#[test]
fn a_kept_scheduler_decides_what_one_built_afresh_would() {
    let jobs: Vec<GpuJob> = (0..10)
        .map(|i| job(&format!("j{i:02}"), 1 + (i % 3), i64::from(i)))
        .collect();
    let mut index = cluster(32, jobs);
    let mut rng = Lcg(7);
    let mut running: Vec<Vec<Pod>> = Vec::new();
    let mut outside: Vec<String> = Vec::new();
    let mut next_job = 10u32;
    let (mut kept_passes, mut admissions, mut incremental) = (0, 0, 0);
    for step in 0..80i64 {
        let t = 10 + step * 7;
        // The same pass twice: over the kept scheduler, and over a copy of the index, which
        // holds none and so builds one afresh.
        let mut fresh = index.clone();
        let built = plan(&mut fresh, at(t));
        let pass = plan(&mut index, at(t));
        assert!(built.summary.scheduler_rebuilt);
        assert_eq!(pass.actions, built.actions, "pass at {t}");
        assert_same_findings(&pass.summary, &built.summary, t);
        assert_eq!(
            built.summary.settled,
            index.len().0,
            "a copy settles every job"
        );
        if !pass.summary.scheduler_rebuilt {
            kept_passes += 1;
        }
        if pass.summary.settled < built.summary.settled {
            incremental += 1;
        }
        land_all(&mut index, &pass.actions, t);
        for action in &pass.actions {
            if let Action::Release { gang, .. } = action {
                admissions += 1;
                // One gang in four never becomes Ready: its pods-ready timeout (300 s)
                // strikes by time alone, many passes later.
                let ready = admissions % 4 != 0;
                let pods: Vec<Pod> = gang
                    .pods
                    .iter()
                    .map(|p| with_phase(p.clone(), "Running", ready))
                    .collect();
                for pod in &pods {
                    index.apply(pod.clone());
                }
                running.push(pods);
            }
        }
        // What happens before the next pass.
        match rng.below(6) {
            0 | 1 if !running.is_empty() => {
                let done =
                    running.remove(usize::try_from(rng.below(running.len() as u64)).unwrap_or(0));
                for pod in done {
                    index.apply(with_phase(pod, "Succeeded", false));
                }
            }
            2 => {
                let name = format!("j{next_job:02}");
                let count = 1 + u32::try_from(rng.below(3)).unwrap_or(0);
                index.apply(job(&name, count, t));
                next_job += 1;
            }
            3 if outside.len() < 3 => {
                let name = format!("server-{step}");
                let node = format!("n{}", 1 + rng.below(4));
                index.apply(outside_pod(&name, &node, 4));
                outside.push(name);
            }
            3 => {
                let name = outside.remove(0);
                let pod: Pod = outside_pod(&name, "n1", 4);
                index.delete(&pod);
            }
            4 => {
                // A waiting job deleted (without the finalizer: gone at once).
                let waiting = (0..next_job)
                    .rev()
                    .filter_map(|i| index.job(&format!("team-a/j{i:02}")))
                    .find(|j| {
                        j.status.as_ref().is_none_or(|s| {
                            s.admission.is_none()
                                && s.phase.is_none_or(|p| {
                                    matches!(p, GpuJobPhase::Pending | GpuJobPhase::Queued)
                                })
                        })
                    })
                    .cloned();
                if let Some(j) = waiting {
                    index.delete(&j);
                }
            }
            _ => {}
        }
    }
    assert!(admissions >= 10, "{admissions} admissions");
    assert!(
        kept_passes >= 20,
        "only {kept_passes} passes kept the scheduler"
    );
    assert!(
        incremental >= 40,
        "only {incremental} passes settled fewer jobs than there are"
    );
}
