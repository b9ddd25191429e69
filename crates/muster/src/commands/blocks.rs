//! `muster blocks`: free GPUs per flavor and topology domain, down to each node, so a user
//! sees why 16 GPUs free in all do not hold a 16-GPU gang that needs one block.

use std::process::ExitCode;

use muster_api::visibility::BlockList;

use super::live::{Connection, Output, Table, client, colour, get, gpus, print_document};

/// Arguments of `muster blocks`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    connection: Connection,
    /// Only this flavor.
    #[arg(long)]
    flavor: Option<String>,
    /// Output format: a table by default; `wide` adds the jobs holding GPUs in each domain.
    #[arg(short, long, value_enum)]
    output: Option<Output>,
}

/// Prints the blocks.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let runtime = super::live_runtime()?;
    let mut list: BlockList = runtime.block_on(async {
        let client = client(&args.connection).await?;
        get(&client, "/blocks").await
    })?;
    if let Some(flavor) = &args.flavor {
        list.items.retain(|b| &b.flavor == flavor);
    }
    match args.output {
        Some(format @ (Output::Json | Output::Yaml)) => print_document(&list, format)?,
        wide => print!("{}", render(&list, wide == Some(Output::Wide), colour())),
    }
    Ok(ExitCode::SUCCESS)
}

/// The table `muster blocks` prints: each domain indented under the one above it.
pub fn render(list: &BlockList, wide: bool, colour: bool) -> String {
    let mut header = vec![
        "FLAVOR",
        "DOMAIN",
        "LEVEL",
        "NODES",
        "GPUS",
        "FREE",
        "MOST FREE ON A NODE",
    ];
    if wide {
        header.push("JOBS");
    }
    let mut table = Table::new(&header);
    for block in &list.items {
        let depth = block.path.len().saturating_sub(1);
        let mut row = vec![
            block.flavor.clone(),
            format!(
                "{}{}",
                "  ".repeat(depth),
                block.path.last().cloned().unwrap_or_default()
            ),
            block.level.clone(),
            block.nodes.to_string(),
            gpus(block.gpus),
            gpus(block.free_gpus),
            gpus(block.largest_free_on_a_node),
        ];
        if wide {
            row.push(
                block
                    .jobs
                    .iter()
                    .map(|(job, n)| format!("{job}={}", gpus(*n)))
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
        table.row(row);
    }
    if table.is_empty() {
        return "No nodes under any flavor.\n".to_owned();
    }
    table.render(colour)
}
