//! The command line: global options, subcommands and their arguments (clap derive).

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "Hierarchical compression engine: long context at five abstraction levels, answers with citations to exact source spans."
)]
pub struct Cli {
    /// Where the store lives: a directory (sled, the index beside it), or a PostgreSQL
    /// database `postgres://USER:PASSWORD@HOST:PORT/DB` shared by any number of strata
    /// processes (each keeps its own index under store.index_dir).
    #[arg(long, global = true, env = "STRATA_DB", default_value = "strata-data")]
    pub db: PathBuf,
    /// A TOML configuration file (every option is also a STRATA_SECTION_FIELD variable).
    #[arg(long, global = true, env = "STRATA_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Compression (sub) model: `offline` or `openai:MODEL` (sets model.sub).
    #[arg(long, global = true, value_name = "MODEL")]
    pub model: Option<String>,
    /// Navigating (root) model: `openai:MODEL`, or `offline` (sets model.root).
    #[arg(long, global = true, value_name = "MODEL")]
    pub root_model: Option<String>,
    /// An OpenAI-compatible API, e.g. http://127.0.0.1:8080/v1 (sets model.base_url).
    #[arg(long, global = true, value_name = "URL")]
    pub base_url: Option<String>,
    /// Embedding model for hybrid (dense + BM25) retrieval: `openai:MODEL`, `local:DIR`,
    /// `static:DIR`, or `off` (sets embed.model).
    #[arg(long, global = true, value_name = "MODEL")]
    pub embed_model: Option<String>,
    /// The OpenAI-compatible API serving /v1/embeddings (sets embed.base_url; default:
    /// the --base-url one).
    #[arg(long, global = true, value_name = "URL")]
    pub embed_base_url: Option<String>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Clone)]
pub enum Cmd {
    /// Add documents (.txt, .md) or a debate (JSON Lines turns) to a scope.
    Ingest {
        #[arg(long)]
        scope: String,
        /// doc or debate (default: .jsonl files are debates, anything else documents).
        #[arg(long)]
        kind: Option<String>,
        /// When the documents were written: an RFC 3339 time or a date (2026-03-04).
        /// Debate turns carry their own `time`.
        #[arg(long, value_name = "TIME")]
        time: Option<String>,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Build or refresh every level of a scope (cached nodes cost nothing).
    Compress {
        #[arg(long)]
        scope: String,
    },
    /// Print a scope at a level within a token budget.
    Context {
        #[arg(long)]
        scope: String,
        /// full, detailed, summary, abstract, metadata or auto.
        #[arg(long, default_value = "auto")]
        level: String,
        /// Maximum tokens (cl100k).
        #[arg(long)]
        budget: usize,
        /// Build the window for this question (or the turn about to be spoken): the turns
        /// or passages that bear on it, after a short overview.
        #[arg(long = "for", value_name = "TEXT", conflicts_with = "level")]
        focus: Option<String>,
        #[command(flatten)]
        during: During,
    },
    /// Answer a question with citations to exact source spans.
    Query {
        /// The scope to search (or --all).
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        scope: Option<String>,
        /// Search every scope.
        #[arg(long)]
        all: bool,
        /// Append the query's trajectory to FILE as JSON Lines (see `strata trace`).
        #[arg(long, value_name = "FILE")]
        trace: Option<std::path::PathBuf>,
        /// Answer from what was gathered after this many milliseconds (default
        /// `query.time_limit_ms`; 0 = none). Ctrl-C (or SIGTERM) does the same at once; a
        /// second one quits without an answer.
        #[arg(long, value_name = "MS")]
        time_limit_ms: Option<u64>,
        #[command(flatten)]
        during: During,
        question: String,
    },
    /// Render trajectories (from `query --trace`) as one self-contained HTML page: the
    /// abstraction tree with the path taken through it, the steps, the cited spans in
    /// their sources.
    Trace {
        /// The JSON Lines trace file.
        file: std::path::PathBuf,
        /// Where to write the page (default: FILE with the extension .html).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// BM25 search of the levels (what the navigator's `grep` sees).
    Grep {
        /// Scopes to search (default: all).
        #[arg(long)]
        scope: Vec<String>,
        /// Levels to search (default: all); repeat or comma-separate.
        #[arg(long, value_delimiter = ',')]
        level: Vec<String>,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        pattern: String,
    },
    /// Serve the HTTP API (debates, documents, jobs, /metrics, /healthz) until SIGINT/SIGTERM.
    Serve {
        /// Address to listen on (default: server.addr, 127.0.0.1:7878).
        #[arg(long)]
        addr: Option<String>,
    },
    /// Serve the Model Context Protocol on stdin/stdout for agents (tools: load_corpus,
    /// sub_query, execute_analysis, context, query, grep, peek, forget) until stdin closes.
    Mcp,
    /// Scopes, levels, nodes, index and disk usage.
    Stats {
        /// Also where the bytes go: source texts, each level's nodes (text and whole
        /// records), vectors, the store's own overhead, the index by component. Reads every
        /// record once.
        #[arg(long)]
        bytes: bool,
    },
    /// Remove sources (none named: the whole scope) with every node derived from them,
    /// from the store and the index; the rest of the scope is rebuilt on the next compress
    /// or read. Says what it removed.
    Forget {
        #[arg(long)]
        scope: String,
        /// Source ids as ingested (a document's path as given, a turn's `debate#turn-N`).
        sources: Vec<String>,
    },
    /// Remove expired and unreachable nodes.
    Gc,
    /// Rebuild the full-text index from the store.
    Reindex,
    /// Recover a store after a full disk or a crash: set aside the sled files it cannot
    /// read, copy what is readable into a fresh store if part of it is lost, check every
    /// record, rebuild the index; says what it did.
    Repair,
    /// Distil a static embedder (`--embed-model static:OUT`: a vector per token, averaged;
    /// over a thousand nodes a second) from a local sentence encoder (`local:FROM`, e.g. the
    /// directory scripts/fetch-minilm.sh prints): one pass of the model over every token
    /// of its vocabulary, a few minutes on two cores. Needs `--features local-embed`.
    EmbedDistill {
        /// The model directory (config.json, model.safetensors, tokenizer.json).
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
        /// Where to write static.safetensors, tokenizer.json and static.json.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Measure answer quality on generated tasks over real text (needles in haystacks,
    /// multi-hop, debate recall, per-level fidelity); writes report.json, report.md and
    /// eval.svg. Uses its own stores under --out, never --db.
    Eval(Box<EvalArgs>),
}

impl Cmd {
    /// Commands that only read the store: they open it read-only
    /// (`Engine::open_read_only`). `context` and `query` still build missing or expired
    /// levels first, which writes.
    pub fn reads_only(&self) -> bool {
        matches!(
            self,
            Cmd::Stats { .. }
                | Cmd::Context { .. }
                | Cmd::Query { .. }
                | Cmd::Grep { .. }
                | Cmd::Trace { .. }
        )
    }

    /// Whether the command counts tokens for certain (a window is cut to a token
    /// budget): its tokenizer is built while the store opens. A query sizes nothing it
    /// reads (prompt frames are a table: `model::prompts::frame_tokens`).
    pub fn counts_tokens(&self) -> bool {
        matches!(self, Cmd::Context { .. })
    }
}

/// `--since` / `--until`: only what was said in a time range (sources without a time are
/// then left out).
#[derive(clap::Args, Clone)]
pub struct During {
    /// Only sources said at or after TIME (RFC 3339, or a date: from its start).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only sources said at or before TIME (RFC 3339, or a date: to its end).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
}

impl During {
    pub fn range(&self) -> strata::Result<strata::TimeRange> {
        strata::TimeRange::parse(self.since.as_deref(), self.until.as_deref())
    }
}

#[derive(clap::Args, Clone)]
#[cfg_attr(not(feature = "eval"), allow(dead_code))]
pub struct EvalArgs {
    /// Directories of .txt files to cut haystacks from (e.g. from scripts/fetch-essays.sh
    /// and scripts/fetch-sotu.sh); the first makes the small haystacks.
    #[arg(long, required = true)]
    pub corpus: Vec<PathBuf>,
    /// Haystack sizes in tokens, comma-separated (8k, 512k, 2M...).
    #[arg(long, value_delimiter = ',', default_value = "8k,32k,128k,512k,1M,2M")]
    pub sizes: Vec<String>,
    /// Single needles per haystack.
    #[arg(long, default_value_t = 20)]
    pub needles: usize,
    /// Needles about real places, asked in other words, per haystack (at most 40).
    #[arg(long, default_value_t = 10)]
    pub paraphrases: usize,
    /// Multi-needle questions (three facts each) per haystack.
    #[arg(long, default_value_t = 4)]
    pub multi: usize,
    /// Multi-hop questions per haystack.
    #[arg(long, default_value_t = 4)]
    pub hops: usize,
    /// Rounds of the generated debate (0 = skip the debate task).
    #[arg(long, default_value_t = 200)]
    pub debate_rounds: usize,
    #[arg(long, default_value_t = 5)]
    pub debate_speakers: usize,
    #[arg(long, default_value_t = 12)]
    pub debate_topics: usize,
    /// Rounds of the aggregate debate, whose questions ask for sets of turns (0 = skip).
    #[arg(long, default_value_t = 300)]
    pub aggregate_rounds: usize,
    #[arg(long, default_value_t = 5)]
    pub aggregate_speakers: usize,
    #[arg(long, default_value_t = 8)]
    pub aggregate_topics: usize,
    /// Tokens of text for the per-level fidelity task (0 = skip).
    #[arg(long, default_value = "100k")]
    pub fidelity_tokens: String,
    /// Hand-written questions over given files (data/questions.json for the samples).
    #[arg(long, value_name = "FILE")]
    pub questions: Option<PathBuf>,
    /// Rounds of the context-retention debate (0 = skip the retention task).
    #[arg(long, default_value_t = 300)]
    pub retention_rounds: usize,
    #[arg(long, default_value_t = 5)]
    pub retention_speakers: usize,
    /// Key facts planted in the retention debate (and as many decoys).
    #[arg(long, default_value_t = 50)]
    pub retention_facts: usize,
    /// Context-window budgets of the retention task, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1k,2k,4k,8k")]
    pub retention_budgets: Vec<String>,
    /// More seeds for the retention debate, comma-separated (text not tuned on).
    #[arg(long, value_delimiter = ',')]
    pub retention_seeds: Vec<u64>,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Where the report, the table and the plot are written.
    #[arg(long, default_value = "eval-out")]
    pub out: PathBuf,
    /// Keep the stores built for each task (under OUT/work).
    #[arg(long)]
    pub keep: bool,
    /// Fail (exit 1) when a task's accuracy over all sizes is below a floor:
    /// TASK=MIN, e.g. single_needle=0.95 or debate=0.9; TASK_recall=MIN and
    /// TASK_precision=MIN for mean citation recall / precision, e.g. aggregate_recall=0.7;
    /// repeatable.
    #[arg(long, value_name = "TASK=MIN")]
    pub floor: Vec<String>,
}
