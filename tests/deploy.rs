//! The manifests in `deploy/`: they parse as the Kubernetes objects they claim to be, the
//! Deployment runs the controller highly available and locked down with flags the binary
//! accepts, and the RBAC grants exactly the verbs the controller uses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use serde::Deserialize;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every document of every YAML file in `deploy/` (not its subfolders), by kind.
fn documents() -> BTreeMap<String, Vec<serde_json::Value>> {
    let mut by_kind: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    let mut paths: Vec<_> = std::fs::read_dir(repo().join("deploy"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = serde_json::Value::deserialize(document)
                .unwrap_or_else(|e| unreachable!("{}: {e}", path.display()));
            let kind = value["kind"].as_str().unwrap_or_default().to_owned();
            by_kind.entry(kind).or_default().push(value);
        }
    }
    by_kind
}

fn typed<T: serde::de::DeserializeOwned>(value: &serde_json::Value) -> T {
    serde_json::from_value(value.clone()).unwrap_or_else(|e| unreachable!("{e}: {value}"))
}

fn grants(rules: &[PolicyRule]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for rule in rules {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.insert(format!("{group}/{resource}:{verb}"));
                }
            }
        }
    }
    out
}

#[test]
fn the_controller_runs_two_locked_down_replicas_with_flags_it_accepts() {
    let docs = documents();
    let deployment: Deployment = typed(&docs["Deployment"][0]);
    let spec = deployment.spec.unwrap_or_default();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap_or_default();
    assert_eq!(
        pod.security_context
            .as_ref()
            .and_then(|s| s.run_as_non_root),
        Some(true)
    );
    let container = &pod.containers[0];
    let security = container.security_context.clone().unwrap_or_default();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(
        probe_path(&container.liveness_probe).as_deref(),
        Some("/livez")
    );
    assert_eq!(
        probe_path(&container.readiness_probe).as_deref(),
        Some("/readyz")
    );
    let args = container.args.clone().unwrap_or_default();
    assert_eq!(args[0], "controller");
    assert!(args.iter().any(|a| a == "--leader-elect"));
    let help = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["controller", "--help"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for flag in args.iter().skip(1) {
        let name = flag.split('=').next().unwrap_or_default();
        assert!(
            help.contains(name),
            "`muster controller` has no flag {name}"
        );
    }
}

#[test]
fn rbac_grants_exactly_the_verbs_the_controller_uses() {
    let docs = documents();
    let cluster_role: ClusterRole = typed(&docs["ClusterRole"][0]);
    let expected: BTreeSet<String> = [
        "muster.dev/gpujobs:get",
        "muster.dev/gpujobs:list",
        "muster.dev/gpujobs:watch",
        "muster.dev/gpujobs:patch",
        "muster.dev/gpujobs:create",
        "batch/jobs:list",
        "batch/jobs:watch",
        "batch/jobs:patch",
        "batch/jobs/finalizers:update",
        "jobset.x-k8s.io/jobsets:list",
        "jobset.x-k8s.io/jobsets:watch",
        "jobset.x-k8s.io/jobsets:patch",
        "jobset.x-k8s.io/jobsets/finalizers:update",
        "muster.dev/clusterqueues:list",
        "muster.dev/clusterqueues:watch",
        "muster.dev/cohorts:list",
        "muster.dev/cohorts:watch",
        "muster.dev/localqueues:list",
        "muster.dev/localqueues:watch",
        "muster.dev/resourceflavors:list",
        "muster.dev/resourceflavors:watch",
        "muster.dev/gpujobs/status:patch",
        "muster.dev/gpujobs/finalizers:update",
        "muster.dev/clusterqueues/status:patch",
        "muster.dev/cohorts/status:patch",
        "muster.dev/localqueues/status:patch",
        "muster.dev/resourceflavors/status:patch",
        "/pods:list",
        "/pods:watch",
        "/pods:create",
        "/pods:patch",
        "/pods:delete",
        "/services:create",
        "/services:patch",
        "/services:delete",
        "/nodes:list",
        "/nodes:watch",
        "/namespaces:list",
        "/namespaces:watch",
        "scheduling.k8s.io/podgroups:create",
        "scheduling.k8s.io/podgroups:list",
        "scheduling.k8s.io/podgroups:watch",
        "scheduling.k8s.io/priorityclasses:list",
        "scheduling.k8s.io/priorityclasses:watch",
        "autoscaling.x-k8s.io/provisioningrequests:list",
        "autoscaling.x-k8s.io/provisioningrequests:watch",
        "autoscaling.x-k8s.io/provisioningrequests:create",
        "autoscaling.x-k8s.io/provisioningrequests:delete",
        "/podtemplates:list",
        "/podtemplates:watch",
        "/podtemplates:create",
        "/podtemplates:delete",
        "events.k8s.io/events:create",
        "events.k8s.io/events:patch",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(grants(&cluster_role.rules.unwrap_or_default()), expected);
    let role: Role = typed(&docs["Role"][0]);
    let lease: BTreeSet<String> = [
        "coordination.k8s.io/leases:get",
        "coordination.k8s.io/leases:create",
        "coordination.k8s.io/leases:patch",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(grants(&role.rules.unwrap_or_default()), lease);
}
