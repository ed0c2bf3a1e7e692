//! `ferrite`: create and inspect pools, run crash tests and benchmarks.
//!
//! Exit status: 0 success; 1 error (I/O, invalid arguments detected after
//! parsing, failed run); 2 the pool file is missing or not a healthy pool (missing header,
//! truncated, zeroed, wrong magic, checksum mismatch, unsupported version,
//! corrupt metadata); 3 a crash test found violations; 64 command-line usage error.

mod cmd;
mod util;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ferrite",
    version,
    about = "Ferrite: a storage engine for persistent memory"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a pool file
    Create(cmd::pool::CreateArgs),
    /// Show a pool's size, usage, objects, format version and durability
    Info(cmd::pool::InfoArgs),
    /// Check a pool's header, directory, allocator and known objects (exit 0 if healthy)
    Check(cmd::pool::CheckArgs),
    /// Cut power at every fence of a workload and check recovery
    CrashTest(cmd::crash::CrashArgs),
    /// Create a pool, write, reopen, verify, and say what happened
    Demo(cmd::demo::DemoArgs),
    /// Benchmarks (PiBench-compatible index benchmark by default; subcommands for the rest)
    Bench(cmd::bench::BenchArgs),
    /// Elf: multi-dimensional index over CSV tables
    #[command(subcommand)]
    Elf(cmd::elf::ElfCommand),
    /// Run one replica of the replicated key-value service (Redis protocol)
    Serve(cmd::serve::ServeArgs),
    /// Start or stop a cluster of replicas on this machine
    #[command(subcommand)]
    Cluster(cmd::cluster::ClusterCommand),
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => util::EXIT_USAGE,
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let result = match cli.command {
        Command::Create(a) => cmd::pool::create(a),
        Command::Info(a) => cmd::pool::info(a),
        Command::Check(a) => cmd::pool::check(a),
        Command::CrashTest(a) => cmd::crash::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Elf(c) => cmd::elf::run(c),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Cluster(c) => cmd::cluster::run(c),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("ferrite: {}", util::one_line(&e));
            std::process::exit(util::exit_code(&e));
        }
    }
}
