//! Records the git commit zshard is built from (`ZSHARD_GIT_COMMIT`) for reports; none when the
//! source is not a git checkout (a crate package) or git is missing. An explicit `ZSHARD_GIT_COMMIT`
//! in the build environment wins.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=ZSHARD_GIT_COMMIT");
    if std::env::var_os("ZSHARD_GIT_COMMIT").is_some() {
        return;
    }
    let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return;
    };
    // Rebuild when HEAD moves: the HEAD file, the branch it names, and packed refs (those that exist,
    // as a missing path would rerun this script on every build).
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watched.into_iter().flatten() {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rustc-env=ZSHARD_GIT_COMMIT={commit}");
}
