//! Sets of named resource amounts, and what one pod asks for.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::{Amount, QuantityError};

/// Well-known resource names.
pub mod names {
    /// CPU cores.
    pub const CPU: &str = "cpu";
    /// Memory in bytes.
    pub const MEMORY: &str = "memory";
    /// Whole NVIDIA GPUs (the device plugin's resource).
    pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
    /// Google Cloud TPU chips.
    pub const GOOGLE_TPU: &str = "google.com/tpu";
    /// Pods (every node has an allocatable pod count).
    pub const PODS: &str = "pods";
    /// Part of one GPU per pod, in milli-GPU: what a pod set with `gpuShare` asks of a node
    /// whose GPUs are handed out in parts. Muster's own scheduling resource: no node
    /// advertises it and no pod requests it.
    pub const GPU_SHARE: &str = "muster.dev/gpu-share";
    /// Prefix of the per-device resources Muster books on nodes whose GPUs it tracks one by
    /// one (`muster.dev/gpu-device-0`, …), 1000 milli each.
    pub const GPU_DEVICE_PREFIX: &str = "muster.dev/gpu-device-";
    /// HAMi's vGPU resources: the percentage of one GPU's cores a vGPU may use, and of its
    /// memory. A share pod gets `nvidia.com/gpu: 1` (one vGPU) and both set to its share.
    pub const HAMI_GPU_CORES: &str = "nvidia.com/gpucores";
    /// See [`HAMI_GPU_CORES`].
    pub const HAMI_GPU_MEMORY_PERCENTAGE: &str = "nvidia.com/gpumem-percentage";

    /// The name of device `index`'s resource (see [`GPU_DEVICE_PREFIX`]).
    pub fn gpu_device(index: u32) -> String {
        format!("{GPU_DEVICE_PREFIX}{index}")
    }
}

/// Named resource amounts, ordered by name so that iteration (and every decision built on it)
/// is deterministic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources(BTreeMap<String, Amount>);

/// A resource amount that could not be read, with the resource it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{resource}: {source}")]
pub struct ResourceError {
    /// The resource name, e.g. `nvidia.com/gpu`.
    pub resource: String,
    /// What was wrong with its quantity.
    pub source: QuantityError,
}

impl Resources {
    /// No resources.
    pub fn new() -> Resources {
        Resources::default()
    }

    /// Reads a Kubernetes resource list (`{cpu: "4", memory: 16Gi}`).
    pub fn from_quantities(list: &BTreeMap<String, Quantity>) -> Result<Resources, ResourceError> {
        let mut out = Resources::new();
        for (name, q) in list {
            out.add(name, read_amount(name, q)?);
        }
        Ok(out)
    }

    /// The amount of `resource`, zero when absent.
    pub fn get(&self, resource: &str) -> Amount {
        self.0.get(resource).copied().unwrap_or_default()
    }

    /// Sets `resource` to `amount` (removing it when zero, so equal sets compare equal).
    pub fn set(&mut self, resource: &str, amount: Amount) {
        if amount.is_zero() {
            self.0.remove(resource);
        } else {
            self.0.insert(resource.to_owned(), amount);
        }
    }

    /// Adds `amount` of `resource`, saturating.
    pub fn add(&mut self, resource: &str, amount: Amount) {
        let sum = self.get(resource).saturating_add(amount);
        self.set(resource, sum);
    }

    /// Adds every amount of `other`, saturating.
    pub fn add_all(&mut self, other: &Resources) {
        for (name, amount) in &other.0 {
            self.add(name, *amount);
        }
    }

    /// Subtracts every amount of `other`, stopping at zero.
    pub fn saturating_sub_all(&mut self, other: &Resources) {
        for (name, amount) in &other.0 {
            let left = self.get(name).saturating_sub(*amount);
            self.set(name, left);
        }
    }

    /// Raises every amount to at least the one in `other` (element-wise maximum).
    pub fn max_all(&mut self, other: &Resources) {
        for (name, amount) in &other.0 {
            if *amount > self.get(name) {
                self.set(name, *amount);
            }
        }
    }

    /// Every amount multiplied by `n`, saturating.
    #[must_use]
    pub fn times(&self, n: u64) -> Resources {
        Resources(
            self.0
                .iter()
                .filter(|_| n > 0)
                .map(|(k, v)| (k.clone(), v.saturating_mul(n)))
                .collect(),
        )
    }

    /// Whether every amount here is at most the one in `capacity`.
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        self.0
            .iter()
            .all(|(name, amount)| *amount <= capacity.get(name))
    }

    /// The first resource (by name) where `self` exceeds `capacity`, with both amounts.
    pub fn first_shortfall(&self, capacity: &Resources) -> Option<(&str, Amount, Amount)> {
        self.0
            .iter()
            .find(|(name, amount)| **amount > capacity.get(name))
            .map(|(name, amount)| (name.as_str(), *amount, capacity.get(name)))
    }

    /// Whether there are no non-zero amounts.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The non-zero amounts, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Amount)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// As a Kubernetes resource list.
    pub fn to_quantities(&self) -> BTreeMap<String, Quantity> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone(), Quantity(v.format_for(k))))
            .collect()
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (name, amount)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name}: {}", amount.format_for(name))?;
        }
        f.write_str("}")
    }
}

impl FromIterator<(String, Amount)> for Resources {
    fn from_iter<T: IntoIterator<Item = (String, Amount)>>(iter: T) -> Self {
        let mut out = Resources::new();
        for (k, v) in iter {
            out.add(&k, v);
        }
        out
    }
}

/// What one container asks for: its requests, falling back to its limits for any resource that
/// has a limit but no request (as the API server defaults it).
pub fn container_requests(
    requirements: Option<&ResourceRequirements>,
) -> Result<Resources, ResourceError> {
    let Some(r) = requirements else {
        return Ok(Resources::new());
    };
    let mut out = match &r.requests {
        Some(requests) => Resources::from_quantities(requests)?,
        None => Resources::new(),
    };
    if let Some(limits) = &r.limits {
        for (name, q) in limits {
            if !r
                .requests
                .as_ref()
                .is_some_and(|req| req.contains_key(name))
            {
                out.add(name, read_amount(name, q)?);
            }
        }
    }
    Ok(out)
}

/// Reads one resource's quantity, naming the resource in the error.
fn read_amount(resource: &str, q: &Quantity) -> Result<Amount, ResourceError> {
    Amount::try_from(q).map_err(|source| ResourceError {
        resource: resource.to_owned(),
        source,
    })
}

/// What a pod with this spec needs on its node, computed as the kube-scheduler does: the larger
/// of (all app containers plus all sidecars) and the peak during init (each ordinary init
/// container runs alone beside the sidecars started before it), plus the pod overhead.
pub fn pod_requests(spec: &PodSpec) -> Result<Resources, ResourceError> {
    let mut app = Resources::new();
    for c in &spec.containers {
        app.add_all(&container_requests(c.resources.as_ref())?);
    }
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let need = container_requests(c.resources.as_ref())?;
        if is_sidecar(c) {
            sidecars.add_all(&need);
            init_peak.max_all(&sidecars);
        } else {
            let mut during = need;
            during.add_all(&sidecars);
            init_peak.max_all(&during);
        }
    }
    app.add_all(&sidecars);
    app.max_all(&init_peak);
    if let Some(overhead) = &spec.overhead {
        app.add_all(&Resources::from_quantities(overhead)?);
    }
    Ok(app)
}

/// An init container with `restartPolicy: Always` keeps running beside the app containers.
fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    }

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: (!requests.is_empty()).then(|| q(requests)),
                limits: (!limits.is_empty()).then(|| q(limits)),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        }
    }

    #[test]
    fn limits_stand_in_for_missing_requests() {
        let c = container(&[("cpu", "2")], &[("cpu", "4"), ("nvidia.com/gpu", "8")]);
        let r = container_requests(c.resources.as_ref()).unwrap_or_default();
        assert_eq!(r.get("cpu"), Amount::from_units(2));
        assert_eq!(r.get("nvidia.com/gpu"), Amount::from_units(8));
    }

    #[test]
    fn pod_requests_follow_the_scheduler() {
        let spec = PodSpec {
            containers: vec![
                container(&[("cpu", "1"), ("nvidia.com/gpu", "4")], &[]),
                container(&[("cpu", "1")], &[]),
            ],
            init_containers: Some(vec![
                container(&[("cpu", "5")], &[]),
                Container {
                    restart_policy: Some("Always".into()),
                    ..container(&[("cpu", "500m")], &[])
                },
            ]),
            overhead: Some(q(&[("cpu", "100m")])),
            ..PodSpec::default()
        };
        let r = pod_requests(&spec).unwrap_or_default();
        // max(app 2 + sidecar 0.5, init peak 5) + overhead 0.1
        assert_eq!(r.get("cpu"), Amount::from_milli(5_100));
        assert_eq!(r.get("nvidia.com/gpu"), Amount::from_units(4));
    }

    #[test]
    fn bad_quantities_name_their_resource() {
        let c = container(&[("memory", "lots")], &[]);
        let err = container_requests(c.resources.as_ref()).err();
        assert_eq!(err.map(|e| e.resource), Some("memory".to_owned()));
    }

    #[test]
    fn set_arithmetic() {
        let a: Resources = [("cpu".to_owned(), Amount::from_units(4))]
            .into_iter()
            .collect();
        let mut b = a.times(2);
        assert!(a.fits_in(&b));
        assert!(!b.fits_in(&a));
        assert_eq!(
            b.first_shortfall(&a),
            Some(("cpu", Amount::from_units(8), Amount::from_units(4)))
        );
        b.saturating_sub_all(&a);
        b.saturating_sub_all(&a);
        assert!(b.is_empty());
        assert_eq!(a.to_string(), "{cpu: 4}");
    }
}
