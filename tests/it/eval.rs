//! The evaluation harness as a regression test: a small run over the committed sample text
//! (no network), with floors under every task, so answer quality cannot silently drop.
//! The full run (essays and SOTU, 8k–2M tokens) is `scripts/eval.sh`; see docs/EVAL.md.

use crate::support::{repo, rt};
use strata::Config;
use strata::eval::{self, Options};

/// One run with the default configuration, its progress on stderr.
fn run_on(opts: &Options, docs: &[eval::tasks::Doc]) -> eval::Report {
    rt().block_on(eval::run(
        &Config::default(),
        opts,
        docs,
        &|l| eprintln!("{l}"),
        &|_| {},
    ))
    .unwrap()
}

fn small(work: &std::path::Path) -> Options {
    Options {
        seed: 11,
        sizes: vec![8_000, 24_000],
        needles: 12,
        paraphrases: 6,
        multi: 2,
        hops: 3,
        debate_rounds: 60,
        debate_speakers: 4,
        debate_topics: 8,
        aggregate_rounds: 0,
        aggregate_speakers: 5,
        aggregate_topics: 5,
        fidelity_tokens: 20_000,
        retention_rounds: 0,
        retention_speakers: 5,
        retention_facts: 40,
        retention_budgets: vec![1_000, 2_000, 4_000, 8_000],
        retention_seeds: Vec::new(),
        questions: Some(repo().join("data/questions.json")),
        work: work.to_path_buf(),
        keep: false,
    }
}

#[test]
fn eval_small_run_stays_above_its_floors() {
    let dir = tempfile::tempdir().unwrap();
    let docs = eval::load_corpus(&[repo().join("data/docs")]).unwrap();
    assert_eq!(docs.len(), 4, "the four committed addresses");
    let opts = small(dir.path());
    let report = rt()
        .block_on(eval::run(
            &Config::default(),
            &opts,
            &docs,
            &|l| eprintln!("{l}"),
            &|partial| assert!(!partial.complete),
        ))
        .unwrap();
    eprintln!("{}", eval::markdown(&report));
    assert!(report.complete);

    // Every question was run and scored.
    let n = |t: &str| report.questions.iter().filter(|q| q.task == t).count();
    assert_eq!(n("single_needle"), 2 * 12);
    assert_eq!(n("needle_paraphrase"), 2 * 6);
    assert_eq!(n("multi_needle"), 2 * 2);
    assert_eq!(
        n("handwritten"),
        16,
        "every question of data/questions.json"
    );
    assert_eq!(n("multi_hop"), 2 * 3);
    assert!(
        report
            .questions
            .iter()
            .filter(|q| q.task.starts_with("debate"))
            .count()
            >= 24
    );
    for q in &report.questions {
        assert!(q.citation_precision >= 0.0 && q.citation_precision <= 1.0);
        assert!(q.tokens_to_root > 0, "{}: nothing read", q.question);
    }
    // Floors, a little under what this run scores today (see docs/EVAL.md).
    let floor = |task: &str, min: f64| {
        let a = report.accuracy(task).unwrap();
        assert!(
            a >= min,
            "{task}: accuracy {a:.3} fell below its floor {min}"
        );
    };
    floor("single_needle", 0.95);
    floor("multi_needle", 0.5);
    floor("multi_hop", 0.6);
    floor("needle_paraphrase", 0.8);
    floor("handwritten", 0.8);
    // The hand-written set questions (data/questions.json, `"set": true`): text the set
    // mechanism was not written for.
    assert_eq!(n("handwritten_set"), 6);
    let (recall, precision) = report.citation_scores("handwritten_set").unwrap();
    assert!(
        recall >= HANDWRITTEN_SET_RECALL && precision >= HANDWRITTEN_SET_PRECISION,
        "handwritten_set: recall {recall:.3}, precision {precision:.3}"
    );
    let d = report.debate_accuracy().unwrap();
    assert!(d >= 0.85, "debate recall {d:.3} fell below its floor 0.85");
    // The navigator reads a fraction of the haystack, not all of it.
    for t in report.tasks.iter().filter(|t| t.full_tokens >= 20_000) {
        assert!(
            t.tokens_to_root < 0.5 * t.full_tokens as f64,
            "{} read {} of {} tokens per question",
            t.instance,
            t.tokens_to_root,
            t.full_tokens
        );
    }
    // Every level keeps more key facts than deleting random sentences to the same size.
    assert_eq!(report.levels.len(), 4);
    for l in &report.levels {
        assert!(
            l.retention > l.baseline_retention,
            "{}: keeps {:.3} of the facts, random deletion {:.3}",
            l.level,
            l.retention,
            l.baseline_retention
        );
    }
    // The report renders, and the plot is an SVG with both panels.
    let md = eval::markdown(&report);
    assert!(md.contains("| single_needle | haystack-8k |"));
    let svg = dir.path().join("eval.svg");
    eval::plot::svg(&report, &svg).unwrap();
    let body = std::fs::read_to_string(&svg).unwrap();
    assert!(body.starts_with("<svg") && body.contains("Tokens read per query"));
}

#[test]
fn eval_is_deterministic_for_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    let docs = eval::load_corpus(&[repo().join("data/docs")]).unwrap();
    let mut opts = small(dir.path());
    opts.sizes = vec![8_000];
    opts.debate_rounds = 40;
    opts.fidelity_tokens = 0;
    let run = || {
        let r = rt()
            .block_on(eval::run(
                &Config::default(),
                &opts,
                &docs,
                &|_| {},
                &|_| {},
            ))
            .unwrap();
        r.questions
            .iter()
            .map(|q| {
                (
                    q.question.clone(),
                    q.gold.clone(),
                    q.cited.clone(),
                    q.correct,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn eval_rejects_bad_inputs_clearly() {
    let dir = tempfile::tempdir().unwrap();
    // No such directory; a directory without .txt files; a haystack larger than the corpus.
    let e = eval::load_corpus(&[dir.path().join("nope")]).unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    let e = eval::load_corpus(&[dir.path().to_path_buf()]).unwrap_err();
    assert!(e.to_string().contains("no .txt files"), "{e}");
    std::fs::write(dir.path().join("bad.txt"), [0xff, 0xfe, b'a']).unwrap();
    let e = eval::load_corpus(&[dir.path().to_path_buf()]).unwrap_err();
    assert!(e.to_string().contains("not UTF-8"), "{e}");
    let docs = eval::load_corpus(&[repo().join("data/docs")]).unwrap();
    let mut opts = small(&dir.path().join("w"));
    opts.sizes = vec![5_000_000];
    let e = rt()
        .block_on(eval::run(
            &Config::default(),
            &opts,
            &docs,
            &|_| {},
            &|_| {},
        ))
        .unwrap_err();
    assert!(e.to_string().contains("needs more text"), "{e}");
    // A question file whose gold quote is not in its source, or that is not JSON.
    let qf = repo().join("data/questions.json");
    let body = std::fs::read_to_string(&qf).unwrap().replace(
        "formation of a National Peace Corps",
        "formation of a Galactic Peace Corps",
    );
    let copy = dir.path().join("copy");
    std::fs::create_dir_all(copy.join("docs")).unwrap();
    std::fs::copy(repo().join("data/debate.jsonl"), copy.join("debate.jsonl")).unwrap();
    for p in crate::support::doc_paths() {
        std::fs::copy(&p, copy.join("docs").join(p.file_name().unwrap())).unwrap();
    }
    let moved = copy.join("questions.json");
    std::fs::write(&moved, body).unwrap();
    let e = eval::handwritten(&moved).map(|_| ()).unwrap_err();
    assert!(e.to_string().contains("Galactic Peace Corps"), "{e}");
    let junk = dir.path().join("q.json");
    std::fs::write(&junk, "{ not json").unwrap();
    let e = eval::handwritten(&junk).map(|_| ()).unwrap_err();
    assert!(e.to_string().contains("not a question file"), "{e}");
    for bad in ["", "k", "-3k", "abc", "9999999M"] {
        assert!(eval::parse_tokens(bad).is_err(), "{bad:?} accepted");
    }
    assert_eq!(eval::parse_tokens("2M").unwrap(), 2_000_000);
    assert_eq!(eval::parse_tokens("8k").unwrap(), 8_000);
}

/// The context-retention task on a small generated debate: every budget is measured, the
/// window stays within it, and the `auto` window keeps the key facts far better than
/// cutting the transcript (floors a little under today's numbers; docs/EVAL.md).
#[test]
fn eval_retention_keeps_key_facts_at_every_budget() {
    let dir = tempfile::tempdir().unwrap();
    let docs = eval::load_corpus(&[repo().join("data/docs")]).unwrap();
    let mut opts = small(dir.path());
    opts.sizes = Vec::new();
    opts.debate_rounds = 0;
    opts.fidelity_tokens = 0;
    opts.questions = None;
    opts.retention_rounds = 120;
    opts.retention_facts = 40;
    let report = run_on(&opts, &docs);
    eprintln!("{}", eval::markdown(&report));
    assert_eq!(report.retention.len(), 4, "one row per budget");
    for r in &report.retention {
        assert!(r.window_tokens <= r.budget, "{r:?}");
        assert_eq!((r.facts, r.decoys), (40, 40));
        assert_eq!(r.by_kind.values().map(|k| k.1).sum::<usize>(), 40);
        for x in [r.retention, r.last_b, r.first_last_b, r.decoy_rate] {
            assert!((0.0..=1.0).contains(&x), "{r:?}");
        }
    }
    let at = |b: usize| report.retention.iter().find(|r| r.budget == b).unwrap();
    // More budget never keeps fewer facts than the transcript's tail does.
    assert!(at(8_000).last_b >= at(1_000).last_b);
    // Floors (today: 42.5 / 82.5 / 95 / 100 %, decoys 15–72.5 %, last-B 2.5–10 %). Until
    // issue 21 they were 40 / 75 / 80 / 85 %, set on cue-phrase rules written for this
    // generator's templates; the general salience that replaced them kept 10 / 20 / 45 /
    // 72.5 %, recurring phrases in the overview (`salience::phrases`, weight chosen on
    // QMSum val) brought them to 40 / 50 / 85 / 95 %, the overview's larger share of the
    // window (four fifths, chosen on QMSum val) to 40 / 70 / 92.5 / 95 %, and a sentence's
    // cost counted with its label, per cost^0.5 (chosen on QMSum val), to today's
    // (docs/EVAL.md).
    for (b, min) in [(1_000, 0.4), (2_000, 0.75), (4_000, 0.9), (8_000, 0.95)] {
        let r = at(b);
        assert!(r.retention >= min, "{b}: {r:?}");
        assert!(r.retention >= 3.0 * r.last_b, "{b}: {r:?}");
        // Decoys are small talk made to look like facts (a figure, a "vote", a template
        // repeated across the debate): at most half as often as the facts, except at 8k,
        // where the overview is a seventh of this short debate and takes much of what
        // looks salient at all (72.5 % of the decoys, 100 % of the facts): fewer than facts.
        let decoys = if b < 8_000 { 0.5 } else { 0.8 };
        assert!(r.decoy_rate <= decoys * r.retention, "{b}: {r:?}");
        assert!(
            r.overview_tokens > 0,
            "{b}: the overview is in every window"
        );
    }
}

/// Regression floors, not evidence. Since the dialogue-act phrase lists were removed
/// (issue 21: set answers by retrieval, contrast among the competing chunks and the
/// largest score drop, no act verbs), the generated aggregate instance scored recall 0.529,
/// precision 0.411 (1.000 / 1.000 with the lists, which were written for its phrasing) and
/// the hand-written set questions 0.208 / 0.214 (0.806 / 0.750 with them). Since set members
/// must hold the names the question writes (`anchored`): 0.647 / 0.520 and 0.264 / 0.375;
/// docs/EVAL.md.
const AGGREGATE_RECALL: f64 = 0.6;
const AGGREGATE_PRECISION: f64 = 0.5;
const HANDWRITTEN_SET_RECALL: f64 = 0.25;
const HANDWRITTEN_SET_PRECISION: f64 = 0.35;

/// The held-out debate (data/heldout/: a school board, written and frozen before the
/// reply work) asked its 6 set questions: recall 0.319, precision 0.370 without the act
/// lists (0.917 / 0.856 with them, a training score: six of their phrases occur only
/// there); 0.264 / 0.500 since set members must hold the question's names (one question,
/// "Who objected to closing the Elm Street library branch?", cites its 2 best turns
/// instead of 9, one of them gold instead of two). The target is recall ≥ 0.7 at
/// precision ≥ 0.5; a regression floor here.
#[test]
fn eval_heldout_set_questions_stay_above_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let docs = eval::load_corpus(&[repo().join("data/docs")]).unwrap();
    let opts = Options {
        sizes: Vec::new(),
        debate_rounds: 0,
        fidelity_tokens: 0,
        questions: Some(repo().join("data/heldout/questions.json")),
        ..small(dir.path())
    };
    let report = run_on(&opts, &docs);
    assert_eq!(
        report
            .questions
            .iter()
            .filter(|q| q.task == "handwritten_set")
            .count(),
        6
    );
    let (recall, precision) = report.citation_scores("handwritten_set").unwrap();
    assert!(
        recall >= 0.25 && precision >= 0.45,
        "held-out handwritten_set: recall {recall:.3}, precision {precision:.3}"
    );
}

/// The aggregate task on a small generated debate: questions whose answer is a set of
/// turns ("which speakers objected to …", "list every deadline …") are answered with every
/// supporting turn found, scored by citation recall and precision against the gold sets;
/// with set answers off (`query.max_set_citations = 0`, main's behaviour before them)
/// recall is lower (and precision higher).
#[test]
fn eval_aggregate_cites_every_supporting_turn() {
    let dir = tempfile::tempdir().unwrap();
    let docs = eval::load_corpus(&[repo().join("data/docs")]).unwrap();
    let mut opts = small(dir.path());
    opts.sizes = Vec::new();
    opts.debate_rounds = 0;
    opts.fidelity_tokens = 0;
    opts.questions = None;
    opts.aggregate_rounds = 80;
    let run = |cfg: &Config| {
        rt().block_on(eval::run(cfg, &opts, &docs, &|l| eprintln!("{l}"), &|_| {}))
            .unwrap()
    };
    let report = run(&Config::default());
    eprintln!("{}", eval::markdown(&report));
    let qs: Vec<_> = report
        .questions
        .iter()
        .filter(|q| q.task == "aggregate")
        .collect();
    assert!(qs.len() >= 12, "{} questions", qs.len());
    assert!(
        qs.iter().any(|q| q.gold.len() >= 4),
        "some gold sets are large"
    );
    for q in &qs {
        eprintln!(
            "{:.2} {:.2} {} cited {} of gold {}",
            q.citation_recall,
            q.citation_precision,
            q.question,
            q.cited.len(),
            q.gold.len()
        );
    }
    let (recall, precision) = report.citation_scores("aggregate").unwrap();
    assert!(
        recall >= AGGREGATE_RECALL && precision >= AGGREGATE_PRECISION,
        "aggregate: recall {recall:.3}, precision {precision:.3}"
    );
    assert_eq!(report.floor_score("aggregate_recall"), Some(recall));
    assert_eq!(report.floor_score("aggregate_precision"), Some(precision));
    // Before set answers: at most `max_citations` per answer.
    let mut before = Config::default();
    before.query.max_set_citations = 0;
    let old = run(&before);
    let (old_recall, old_precision) = old.citation_scores("aggregate").unwrap();
    eprintln!(
        "aggregate: recall {recall:.3}, precision {precision:.3}; set answers off: {old_recall:.3}, {old_precision:.3}"
    );
    // Set answers off, each question is answered as one: the best `max_citations` turns
    // of the conversation's ranking. Measured: set answers 0.647 / 0.520, off 0.549 /
    // 0.392 (before single answers cited ranked turns, off was 0.418 / 0.676). Set answers
    // cite what supports the question rather than the best three turns: more precise, with
    // at least about the same recall.
    assert!(
        precision > old_precision && recall >= old_recall - 0.05,
        "set answers: {recall:.3} / {precision:.3}, off: {old_recall:.3} / {old_precision:.3}"
    );
}
