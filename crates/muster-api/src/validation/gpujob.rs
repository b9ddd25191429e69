//! GpuJob validation.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};

use super::{Errors, FieldError, NameRule, Validate, at};
use crate::gpujob::{GpuJob, GpuJobSpec, MAX_POD_SETS, PodSet, TopologyRequest, TpuSliceRequest};
use crate::quantity::Amount;
use crate::resources::{Resources, container_requests, names, pod_requests};
use crate::tpu;
use crate::wire::ADMISSION_GATE;

impl Validate for GpuJob {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        // The job name becomes the headless Service's name and the prefix of every pod's host
        // name, so it must be a DNS-1035 label.
        e.object_name(&self.metadata, NameRule::Dns1035);
        if let Some(job) = &self.metadata.name {
            pod_host_names_fit(&mut e, job, &self.spec);
        }
        spec(&mut e, &self.spec);
        e.into_vec()
    }
}

impl Validate for GpuJobSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        spec(&mut e, self);
        e.into_vec()
    }
}

/// Pods are named `<job>-<podSet>-<index>` and that name is their DNS host name: at most 63.
fn pod_host_names_fit(e: &mut Errors, job: &str, spec: &GpuJobSpec) {
    for set in &spec.pod_sets {
        let last_index = set.count.saturating_sub(1).max(0).to_string();
        let len = job.len() + set.name.len() + last_index.len() + 2;
        if len > 63 {
            e.push(
                "metadata.name",
                format!(
                    "pod names {job}-{}-<index> would be {len} characters, over the 63 a host name allows; shorten the job name or pod set {:?} by {}",
                    set.name,
                    set.name,
                    len - 63
                ),
            );
        }
    }
}

fn spec(e: &mut Errors, spec: &GpuJobSpec) {
    e.name("spec.queueName", &spec.queue_name, NameRule::Subdomain);
    if spec.priority.is_some() && spec.priority_class_name.is_some() {
        e.push(
            "spec.priorityClassName",
            "set either priority or priorityClassName, not both",
        );
    }
    if let Some(pc) = &spec.priority_class_name {
        e.name("spec.priorityClassName", pc, NameRule::Subdomain);
    }
    positive(
        e,
        "spec.expectedRuntimeSeconds",
        spec.expected_runtime_seconds,
    );
    positive(
        e,
        "spec.podsReadyTimeoutSeconds",
        spec.pods_ready_timeout_seconds,
    );
    if let Some(limit) = spec.backoff_limit.filter(|l| *l < 0) {
        e.push(
            "spec.backoffLimit",
            format!("{limit} is negative; use 0 for no restarts"),
        );
    }
    if spec.pod_sets.is_empty() {
        e.push("spec.podSets", "a job needs at least one pod set");
    }
    if spec.pod_sets.len() > MAX_POD_SETS {
        e.push(
            "spec.podSets",
            format!(
                "{} pod sets; at most {MAX_POD_SETS} are allowed",
                spec.pod_sets.len()
            ),
        );
    }
    let mut seen = BTreeSet::new();
    for (i, set) in spec.pod_sets.iter().enumerate() {
        let path = at("spec", "podSets", i);
        if !seen.insert(set.name.as_str()) {
            e.push(
                format!("{path}.name"),
                format!(
                    "{:?} is used by an earlier pod set; pod set names must be unique",
                    set.name
                ),
            );
        }
        pod_set(e, &path, set);
    }
}

fn positive(e: &mut Errors, path: &str, value: Option<i64>) {
    if let Some(v) = value.filter(|v| *v < 1) {
        e.push(
            path,
            format!("{v} must be at least 1 second; leave it out for the default"),
        );
    }
}

fn pod_set(e: &mut Errors, path: &str, set: &PodSet) {
    e.name(&format!("{path}.name"), &set.name, NameRule::Label);
    if set.count < 1 {
        e.push(
            format!("{path}.count"),
            format!("{} pods; a pod set needs at least 1", set.count),
        );
    }
    let requests = template(e, &format!("{path}.template"), &set.template);
    gpu_share(e, path, set, requests.as_ref());
    if let Some(topology) = &set.topology {
        topology_request(
            e,
            &format!("{path}.topology"),
            topology,
            set.count,
            requests.as_ref(),
        );
    }
}

/// The GPU share: below one GPU, in whole percent (HAMi takes percentages), and the template
/// asks for no GPU of its own (Muster gives each pod its vGPU).
fn gpu_share(e: &mut Errors, path: &str, set: &PodSet, requests: Option<&Resources>) {
    let Some(share) = set.gpu_share_milli() else {
        return;
    };
    let field = format!("{path}.gpuShare");
    let text = set.gpu_share.as_deref().unwrap_or_default();
    match share {
        Err(err) => e.push(
            field,
            format!("{text:?} is not a quantity ({err}); write a part of one GPU, e.g. 500m or 0.25"),
        ),
        Ok(0) => e.push(
            field,
            "is zero; give the part of one GPU each pod needs, e.g. 250m, or remove gpuShare",
        ),
        Ok(milli) if milli >= 1000 => e.push(
            field,
            format!("{text} is one GPU or more; ask for whole GPUs with nvidia.com/gpu in the template and remove gpuShare"),
        ),
        Ok(milli) if milli % 10 != 0 => e.push(
            field,
            format!(
                "{text} is not a whole percent of a GPU (HAMi takes percentages); use {}m or {}m",
                milli / 10 * 10,
                (milli / 10 + 1) * 10
            ),
        ),
        Ok(_) => {}
    }
    let gpu_names = [
        names::NVIDIA_GPU,
        names::HAMI_GPU_CORES,
        names::HAMI_GPU_MEMORY_PERCENTAGE,
        "nvidia.com/gpumem",
    ];
    if let Some(asked) = requests.and_then(|r| gpu_names.into_iter().find(|n| !r.get(n).is_zero()))
    {
        e.push(
            format!("{path}.template"),
            format!("asks for {asked} while gpuShare is set; remove it: Muster gives each pod one vGPU with the share"),
        );
    }
}

fn topology_request(
    e: &mut Errors,
    path: &str,
    t: &TopologyRequest,
    count: i32,
    requests: Option<&Resources>,
) {
    let set: Vec<&str> = [
        t.required.as_ref().map(|_| "required"),
        t.preferred.as_ref().map(|_| "preferred"),
        t.tpu.as_ref().map(|_| "tpu"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if set.len() > 1 {
        e.push(
            path,
            format!(
                "sets {}; give at most one of required, preferred or tpu",
                set.join(" and ")
            ),
        );
    }
    if let Some(level) = &t.required {
        e.qualified_name(&format!("{path}.required"), level);
    }
    if let Some(level) = &t.preferred {
        e.qualified_name(&format!("{path}.preferred"), level);
    }
    if let Some(tpu) = &t.tpu {
        tpu_request(e, &format!("{path}.tpu"), tpu, count, requests);
    }
}

fn tpu_request(
    e: &mut Errors,
    path: &str,
    req: &TpuSliceRequest,
    count: i32,
    requests: Option<&Resources>,
) {
    let Some(acc) = tpu::accelerator(&req.accelerator) else {
        e.push(
            format!("{path}.accelerator"),
            format!(
                "{:?} is not a known TPU accelerator; use one of {}",
                req.accelerator,
                tpu::accelerator_labels()
            ),
        );
        return;
    };
    let shape = match acc.shape(&req.topology) {
        Ok(shape) => Some(shape),
        Err(err) => {
            e.push(format!("{path}.topology"), err.to_string());
            None
        }
    };
    let slices = req.slices();
    if slices < 1 {
        e.push(
            format!("{path}.slices"),
            format!("{slices}; ask for at least 1 slice"),
        );
    }
    if req.allow_rotation && !acc.is_3d() {
        e.push(
            format!("{path}.allowRotation"),
            format!(
                "{} slices are 2D and never rotate; remove allowRotation",
                acc.label
            ),
        );
    }
    let (Some(shape), Some(requests)) = (shape, requests) else {
        return;
    };
    if slices < 1 || count < 1 {
        return;
    }
    let chips_per_pod = requests.get(names::GOOGLE_TPU);
    if chips_per_pod.is_zero() || !chips_per_pod.is_whole() {
        e.push(
            path,
            format!(
                "the pod template requests {} google.com/tpu; each pod runs on one host and must request a whole number of chips per host ({})",
                chips_per_pod,
                join(acc.chips_per_host)
            ),
        );
        return;
    }
    let per_pod = u32::try_from(chips_per_pod.units_ceil()).unwrap_or(u32::MAX);
    let chips = shape.chips();
    if !acc.chips_per_host.contains(&per_pod) || chips % per_pod != 0 || per_pod > chips {
        e.push(
            path,
            format!(
                "each pod requests {per_pod} google.com/tpu, but {} hosts of a {} slice have {} chips each; request a chip count per host that divides the slice's {chips} chips",
                acc.label,
                shape,
                join(acc.chips_per_host)
            ),
        );
        return;
    }
    let hosts = chips / per_pod;
    let want = u64::from(hosts) * u64::try_from(slices).unwrap_or(0);
    if u64::try_from(count).unwrap_or(0) != want {
        e.push(
            format!("{}.count", path.trim_end_matches(".topology.tpu")),
            format!(
                "{count} pods, but {slices} slice(s) of {shape} with {per_pod} chips per host need exactly {want} (one pod per host); set count to {want}"
            ),
        );
    }
}

fn join(values: &[u32]) -> String {
    values
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks the pod template; returns what one pod requests when its quantities can be read.
fn template(e: &mut Errors, path: &str, t: &PodTemplateSpec) -> Option<Resources> {
    let Some(pod) = &t.spec else {
        e.push(
            format!("{path}.spec"),
            "missing; give the pod spec, with at least one container",
        );
        return None;
    };
    let spec_path = format!("{path}.spec");
    if pod.containers.is_empty() {
        e.push(
            format!("{spec_path}.containers"),
            "a pod needs at least one container",
        );
    }
    if let Some(node) = &pod.node_name {
        e.push(
            format!("{spec_path}.nodeName"),
            format!("is set to {node:?}; Muster chooses the nodes of a gang, remove nodeName"),
        );
    }
    if let Some(policy) = pod.restart_policy.as_deref().filter(|p| *p == "Always") {
        e.push(
            format!("{spec_path}.restartPolicy"),
            format!("{policy} never lets the job finish; use Never (Muster restarts the whole gang) or OnFailure"),
        );
    }
    for (i, gate) in pod.scheduling_gates.iter().flatten().enumerate() {
        if gate.name == ADMISSION_GATE {
            e.push(
                at(&spec_path, "schedulingGates", i),
                format!("{ADMISSION_GATE} is Muster's own gate; remove it from the template"),
            );
        }
    }
    let mut names_seen = BTreeSet::new();
    let containers = pod
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (at(&spec_path, "containers", i), c));
    let inits = pod
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| (at(&spec_path, "initContainers", i), c));
    let mut quantities_ok = true;
    for (cpath, c) in containers.chain(inits) {
        if !names_seen.insert(c.name.as_str()) {
            e.push(
                format!("{cpath}.name"),
                format!("{:?} is used by another container", c.name),
            );
        }
        quantities_ok &= container(e, &cpath, c);
    }
    if !quantities_ok {
        return None;
    }
    pod_requests(pod).ok()
}

/// Checks one container; returns whether its resource quantities could all be read.
fn container(e: &mut Errors, path: &str, container: &Container) -> bool {
    let c = container;
    e.name(&format!("{path}.name"), &c.name, NameRule::Label);
    if c.image.as_deref().is_none_or(str::is_empty) {
        e.push(
            format!("{path}.image"),
            "missing; give the container image to run",
        );
    }
    let Some(res) = &c.resources else {
        return true;
    };
    let mut ok = true;
    let mut read = |field: &str,
                    list: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >| {
        let mut out = Resources::new();
        for (name, q) in list.into_iter().flatten() {
            let p = format!("{path}.resources.{field}[{name:?}]");
            match Amount::try_from(q) {
                Ok(a) => out.add(name, a),
                Err(err) => {
                    ok = false;
                    e.push(p, err.to_string());
                }
            }
            if !is_native(name) && !name.contains('/') {
                e.push(
                    format!("{path}.resources.{field}[{name:?}]"),
                    format!("{name:?} is not a known resource; extended resources carry a domain, e.g. nvidia.com/gpu"),
                );
            }
        }
        out
    };
    let requests = read("requests", res.requests.as_ref());
    let limits = read("limits", res.limits.as_ref());
    for (name, req) in requests.iter() {
        let limit = limits.get(name);
        if res.limits.as_ref().is_some_and(|l| l.contains_key(name)) && req > limit {
            e.push(
                format!("{path}.resources.requests[{name:?}]"),
                format!("{req} is more than the limit {limit}; a request may not exceed its limit"),
            );
        }
    }
    if ok && let Ok(effective) = container_requests(Some(res)) {
        for (name, amount) in effective.iter().filter(|(n, _)| !is_native(n)) {
            if !amount.is_whole() {
                e.push(
                    format!("{path}.resources"),
                    format!(
                        "{name} is {amount}; extended resources such as GPUs come in whole units"
                    ),
                );
            }
            let (req, lim) = (requests.get(name), limits.get(name));
            let both = res.requests.as_ref().is_some_and(|m| m.contains_key(name))
                && res.limits.as_ref().is_some_and(|m| m.contains_key(name));
            if both && req != lim {
                e.push(
                    format!("{path}.resources.limits[{name:?}]"),
                    format!("{name} request {req} and limit {lim} differ; extended resources cannot be overcommitted, make them equal"),
                );
            }
        }
    }
    ok
}

/// Resources the kubelet itself accounts for (not extended resources).
fn is_native(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage" | "pods")
        || name.starts_with("hugepages-")
}
