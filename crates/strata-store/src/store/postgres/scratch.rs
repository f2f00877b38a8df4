//! A throwaway PostgreSQL cluster for tests and benchmarks: `initdb` into a temporary
//! directory, the server on a free port of 127.0.0.1, stopped and deleted when the
//! process that started it exits — however it exits, SIGKILL included: the server runs
//! under a small shell that holds the read end of a pipe whose write end only this
//! process has, and stops the server when the pipe closes.
//!
//! The binaries are Debian's (`/usr/lib/postgresql/NN/bin`, the newest), or those of
//! `STRATA_PG_BIN`, or `initdb` on the `PATH`. `initdb` refuses to run as root, so as root
//! the cluster runs as the `postgres` user (or `nobody`).

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A running throwaway cluster (superuser `strata`, trust authentication, 127.0.0.1 only).
pub struct Scratch {
    port: u16,
    next_db: AtomicU64,
    /// Closing it stops the server and deletes its directory.
    _lifeline: ChildStdin,
    _child: Child,
}

/// The directory holding `initdb` and `postgres`.
fn bin_dir() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("STRATA_PG_BIN").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .find(|d| d.join("initdb").exists() && d.join("postgres").exists())
        .ok_or_else(|| {
            "PostgreSQL is not installed (no initdb in /usr/lib/postgresql/*/bin or on the PATH; \
             Debian: apt-get install postgresql)"
                .to_string()
        })
}

/// The user and group to run as when this process is root (initdb refuses root).
fn run_as() -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt as _;
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok()?;
    if me != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let find = |name: &str| {
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[0] == name)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
                .flatten()
        })
    };
    find("postgres").or_else(|| find("nobody"))
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

const SCRIPT: &str = r#"
D="$1"; BIN="$2"; PORT="$3"; SYNC="$4"
if ! "$BIN/initdb" -D "$D/data" -U strata --auth=trust -E UTF8 --locale=C --no-sync >"$D/initdb.log" 2>&1; then
    echo "initdb failed: $(tail -n 3 "$D/initdb.log" | tr '\n' ' ')" >&2
    rm -rf "$D"
    exit 1
fi
exec 3<&0
"$BIN/postgres" -D "$D/data" -p "$PORT" -h 127.0.0.1 -k "$D" \
    -c fsync="$SYNC" -c full_page_writes="$SYNC" -c synchronous_commit=on \
    -c max_connections=300 -c shared_buffers=128MB >"$D/server.log" 2>&1 &
pid=$!
( read _ <&3; kill -INT "$pid" 2>/dev/null ) &
if ! wait "$pid"; then
    echo "postgres stopped: $(tail -n 3 "$D/server.log" | tr '\n' ' ')" >&2
fi
rm -rf "$D"
"#;

impl Scratch {
    /// Starts a cluster. `durable`: fsync on (benchmarks; tests need no crash safety of the
    /// database itself and run faster without). Err: why it cannot start, in one line.
    pub fn start(durable: bool) -> Result<Scratch, String> {
        let bin = bin_dir()?;
        let mut why = String::new();
        for _ in 0..3 {
            match Self::try_start(&bin, durable) {
                Ok(s) => return Ok(s),
                Err(e) => why = e,
            }
        }
        Err(why)
    }

    fn try_start(bin: &Path, durable: bool) -> Result<Scratch, String> {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "strata-pg-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let user = run_as();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", dir.display()))?;
        }
        let port = free_port()?;
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(SCRIPT)
            .arg("strata-pg")
            .arg(&dir)
            .arg(bin)
            .arg(port.to_string())
            .arg(if durable { "on" } else { "off" })
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .env_remove("PGDATA");
        if let Some((uid, gid)) = user {
            c.uid(uid).gid(gid);
        }
        let mut child = c.spawn().map_err(|e| format!("cannot run sh: {e}"))?;
        let lifeline = child.stdin.take().expect("piped");
        let url = format!("postgres://strata@127.0.0.1:{port}/postgres");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return Err(format!(
                    "the PostgreSQL server did not start ({status}): {}",
                    err.trim()
                ));
            }
            if execute(&url, "SELECT 1").is_ok() {
                break;
            }
            if Instant::now() > deadline {
                return Err("the PostgreSQL server was not ready after 120 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Scratch {
            port,
            next_db: AtomicU64::new(0),
            _lifeline: lifeline,
            _child: child,
        })
    }

    /// The cluster of this process, started at first use.
    pub fn shared() -> Result<&'static Scratch, String> {
        static SHARED: OnceLock<Result<Scratch, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Scratch::start(false))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// [`Scratch::shared`] for a test: `None` (and a line saying why the test is skipped)
    /// when PostgreSQL cannot run here — unless `STRATA_REQUIRE_POSTGRES=1` (CI), where
    /// that is a failure.
    pub fn for_test(test: &str) -> Option<&'static Scratch> {
        match Scratch::shared() {
            Ok(s) => Some(s),
            Err(why) => {
                if std::env::var("STRATA_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
                    panic!(
                        "{test}: PostgreSQL is required here (STRATA_REQUIRE_POSTGRES=1): {why}"
                    );
                }
                eprintln!("{test}: skipped, no PostgreSQL: {why}");
                None
            }
        }
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A new, empty database; its URL.
    pub fn database(&self) -> Result<String, String> {
        let name = format!("strata_{}", self.next_db.fetch_add(1, Ordering::SeqCst));
        execute(
            &format!("postgres://strata@127.0.0.1:{}/postgres", self.port),
            &format!("CREATE DATABASE {name}"),
        )?;
        Ok(format!("postgres://strata@127.0.0.1:{}/{name}", self.port))
    }
}

/// Runs statements on a connection of its own, from a thread of its own (so that it can
/// be called from anywhere, async code included).
pub(crate) fn execute(url: &str, sql: &str) -> Result<(), String> {
    let (url, sql) = (url.to_string(), sql.to_string());
    std::thread::spawn(move || execute_here(&url, &sql))
        .join()
        .map_err(|_| "the statement's thread panicked".to_string())?
}

fn execute_here(url: &str, sql: &str) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        let driver = tokio::spawn(conn);
        let r = client.batch_execute(sql).await.map_err(|e| e.to_string());
        drop(client);
        let _ = driver.await;
        r
    })
}
