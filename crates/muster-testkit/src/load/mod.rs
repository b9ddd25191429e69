//! Load runs through the whole system: a real control plane, fake nodes and kubelet, and
//! `muster controller` as a separate process, measured from the API server's side.

pub mod api_floor;
pub mod baseline;
pub mod chaos;
pub mod kueue_baseline;
pub mod process_stats;
pub mod recorder;
