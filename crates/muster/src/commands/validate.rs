//! `muster validate`: check Muster objects in YAML files without a cluster.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use muster_api::Validate;
use muster_api::document::MusterObject;
use muster_api::workload;

use k8s_openapi::api::core::v1::Pod;
use muster_api::manifest as yaml;
use serde_json::Value;

/// Arguments of `muster validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Files or directories (searched recursively for .yaml and .yml files).
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true, num_args = 1..)]
    paths: Vec<PathBuf>,
}

/// One problem found, located by file and document.
struct Finding {
    file: String,
    doc: String,
    field: String,
    message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file, self.doc, self.field, self.message
        )
    }
}

/// What was looked at.
#[derive(Default)]
struct Survey {
    files: usize,
    objects: usize,
    skipped: usize,
    findings: Vec<Finding>,
    /// Pods labelled with a queue and a pod group, by `namespace/group`: each with its file
    /// and document. A group is read once every file is in, as the controller reads it.
    groups: std::collections::BTreeMap<String, Vec<(String, String, Pod)>>,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mut files = Vec::new();
    for path in &args.paths {
        collect(path, &mut files).with_context(|| format!("reading {}", path.display()))?;
    }
    let mut tally = Survey::default();
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        tally.files += 1;
        check_file(&file.display().to_string(), &text, &mut tally);
    }
    check_groups(&mut tally);
    for finding in &tally.findings {
        println!("{finding}");
    }
    let skipped = if tally.skipped > 0 {
        format!(", {} other object(s) skipped", tally.skipped)
    } else {
        String::new()
    };
    if tally.findings.is_empty() {
        eprintln!(
            "{} Muster object(s) in {} file(s): all valid{skipped}",
            tally.objects, tally.files
        );
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "{} error(s) in {} Muster object(s) in {} file(s){skipped}",
            tally.findings.len(),
            tally.objects,
            tally.files
        );
        Ok(ExitCode::FAILURE)
    }
}

/// Adds `path`, or the YAML files under it in name order, to `out`.
fn collect(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        for entry in entries {
            let yaml = entry.extension().is_some_and(|e| e == "yaml" || e == "yml");
            if entry.is_dir() || yaml {
                collect(&entry, out)?;
            }
        }
    } else {
        // Surface a missing file as an error rather than silently checking nothing.
        std::fs::metadata(path)?;
        out.push(path.to_path_buf());
    }
    Ok(())
}

/// Checks every object of one file.
fn check_file(file: &str, text: &str, tally: &mut Survey) {
    let (objects, syntax) = yaml::objects(text);
    for object in objects {
        check_value(file, &object.label, object.value, tally);
    }
    if let Some(err) = syntax {
        tally.findings.push(Finding {
            file: file.to_owned(),
            doc: err.label,
            field: "(yaml)".into(),
            message: err.message,
        });
    }
}

/// Checks one object: Muster's kinds, and the Jobs and JobSets labelled for a Muster queue
/// (read as the GpuJob admission sees; a pod group's pods are gathered and read together
/// afterwards); objects of other APIs are counted and skipped.
fn check_value(file: &str, doc: &str, value: Value, tally: &mut Survey) {
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ours = api_version.split('/').next() == Some(muster_api::GROUP);
    let queued = !ours && workload::is_queued(&value);
    if !ours && !api_version.is_empty() && !queued {
        tally.skipped += 1;
        return;
    }
    if queued && let Some(group) = group_of(&value) {
        match muster_api::document::read_lenient::<Pod>(value) {
            Ok(pod) => {
                tally.objects += 1;
                tally
                    .groups
                    .entry(group)
                    .or_default()
                    .push((file.to_owned(), doc.to_owned(), pod));
            }
            Err(e) => {
                tally.objects += 1;
                tally.findings.push(Finding {
                    file: file.to_owned(),
                    doc: doc.to_owned(),
                    field: e.path,
                    message: e.message,
                });
            }
        }
        return;
    }
    let errors = if queued {
        match workload::read(value) {
            Some(read) => read.err().unwrap_or_default(),
            // Labelled, but of a kind Muster does not queue.
            None => {
                tally.skipped += 1;
                return;
            }
        }
    } else {
        match MusterObject::from_value(value) {
            Ok(object) => object.validate(),
            Err(errors) => errors,
        }
    };
    tally.objects += 1;
    tally.findings.extend(errors.into_iter().map(|e| Finding {
        file: file.to_owned(),
        doc: doc.to_owned(),
        field: e.path,
        message: e.message,
    }));
}

/// `namespace/group` of a labelled pod of a pod group, when `value` is one.
fn group_of(value: &Value) -> Option<String> {
    if value.get("apiVersion").and_then(Value::as_str) != Some("v1")
        || value.get("kind").and_then(Value::as_str) != Some("Pod")
    {
        return None;
    }
    let group = value
        .pointer("/metadata/labels")?
        .get(muster_api::wire::POD_GROUP_LABEL)?
        .as_str()?;
    let namespace = value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    Some(format!("{namespace}/{group}"))
}

/// Reads every pod group found, in pod name order, as the controller does; each problem is
/// reported at the document of the group's first pod. A group need not be whole in the files
/// given: its pods may come from elsewhere.
fn check_groups(tally: &mut Survey) {
    for (key, mut members) in std::mem::take(&mut tally.groups) {
        members.sort_by(|a, b| a.2.metadata.name.cmp(&b.2.metadata.name));
        let pods: Vec<&Pod> = members.iter().map(|(_, _, p)| p).collect();
        let group = key.split_once('/').map_or(key.as_str(), |(_, g)| g);
        let errors = workload::pod_group_as_gpujob(group, &pods)
            .err()
            .unwrap_or_default();
        let Some((file, doc, _)) = members.first() else {
            continue;
        };
        tally.findings.extend(errors.into_iter().map(|e| Finding {
            file: file.clone(),
            doc: doc.clone(),
            field: e.path,
            message: e.message,
        }));
    }
}
