//! Muster's hand-written JobSet types and the shipped JobSet example against the upstream
//! JobSet CRD in `../shared/crds/`: the example is a JobSet the API server would take, and it
//! reads as the GpuJob Muster would queue.

mod support;

use muster_api::jobset::JobSet;
use serde_json::Value;
use support::upstream::{conforms, crd_schema};

fn example() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/examples/tpu-jobset.yaml");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| unreachable!("{}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| unreachable!("{}: {e}", path.display()))
}

#[test]
fn the_shipped_jobset_fits_the_upstream_schema() {
    let Some(schema) = crd_schema("jobset.x-k8s.io_jobsets.yaml", "v1alpha2") else {
        return;
    };
    let mut problems = Vec::new();
    conforms("", &example(), &schema, &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
    // The check reads into the pod template: a misspelt field there is found.
    let mut typo = example();
    if let Some(spec) = typo.pointer_mut("/spec/replicatedJobs/0/template/spec/template/spec") {
        spec["nodeSelectors"] = serde_json::json!({});
    }
    conforms("", &typo, &schema, &mut problems);
    assert_eq!(problems.len(), 1, "{problems:#?}");
}

#[test]
fn the_shipped_jobset_reads_as_two_whole_slices() {
    let typed: JobSet =
        serde_json::from_value(example()).unwrap_or_else(|e| unreachable!("example: {e}"));
    let job =
        muster_api::workload::jobset_as_gpujob(&typed).unwrap_or_else(|e| unreachable!("{e:#?}"));
    let [pods] = job.spec.pod_sets.as_slice() else {
        unreachable!("{:?}", job.spec.pod_sets)
    };
    let slice = pods
        .topology
        .clone()
        .and_then(|t| t.tpu)
        .unwrap_or_default();
    assert_eq!(
        (pods.count, slice.slices, slice.topology.as_str()),
        (8, Some(2), "2x2x4")
    );
}
