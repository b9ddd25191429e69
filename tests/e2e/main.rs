//! Muster end to end on a real control plane: etcd, kube-apiserver and kube-scheduler started
//! by the test kit from `MUSTER_KUBE_BIN`, one cluster per test (so tests run in parallel and
//! again without clean-up), fake nodes and a fake kubelet. Without `MUSTER_KUBE_BIN` every test
//! says it skipped, in one line, and passes.
//!
//! Run: `MUSTER_KUBE_BIN=$HOME/kube-real/bin cargo test -p muster --test e2e`
//! (docs/admins.md#running-the-end-to-end-tests says how to build the control plane).

mod admission_policy;
mod chaos;
mod cohort_trees;
mod dashboard;
mod deploy;
mod forecast;
mod gang;
mod ha;
mod jobsets;
mod leadership;
mod lifecycle;
mod partition;
mod pod_groups;
mod provisioning;
mod shares;
mod status_writes;
mod support;
mod tpu;
mod visibility;
mod workloads;
