//! A multi-agent debate run against `strata serve` over HTTP — what a debate runner in any
//! language does: before each turn, ask for the debate's `auto` context within a token
//! budget; after it, append the turn.
//!
//! ```sh
//! strata serve &                                   # in another terminal
//! cargo run --example debate_runner -- --rounds 12 --budget 600
//! ```
//!
//! With no model configured the agents are scripted (deterministic text that cites earlier
//! rounds from the context they were given). Set `STRATA_RUNNER_BASE_URL` (an
//! OpenAI-compatible `/v1` URL), `STRATA_RUNNER_MODEL` and optionally `OPENAI_API_KEY` to
//! make them real LLM agents.
//!
//! Per round it prints the context tokens each agent was given against the full
//! transcript's tokens.

use serde_json::{Value, json};
use std::time::Instant;

struct Args {
    url: String,
    debate: String,
    rounds: u32,
    budget: usize,
    token: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        url: "http://127.0.0.1:7878".into(),
        debate: format!("runner-{}", strata::unix_now()),
        rounds: 12,
        budget: 600,
        token: std::env::var("STRATA_SERVER_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = val(),
            "--debate" => a.debate = val(),
            "--rounds" => a.rounds = val().parse().expect("--rounds N"),
            "--budget" => a.budget = val().parse().expect("--budget N"),
            "--token" => a.token = Some(val()),
            other => panic!("unknown flag {other} (--url, --debate, --rounds, --budget, --token)"),
        }
    }
    a
}

const AGENTS: [(&str, &str); 3] = [
    (
        "ines",
        "an engineer who argues for a new seawall, cites costs and dates",
    ),
    (
        "omar",
        "a treasurer who questions every cost and proposes cheaper options",
    ),
    (
        "yuki",
        "a resident advocate who cares about who is displaced and proposes safeguards",
    ),
];

/// A scripted turn: a position with a fact of its own, a reply to the latest sentence of
/// another speaker found in the context, and a proposal.
fn scripted(agent: usize, round: u32, context: &str) -> String {
    let (name, _) = AGENTS[agent];
    let others: Vec<&str> = AGENTS.iter().map(|a| a.0).filter(|n| *n != name).collect();
    // The last line of the context spoken by someone else: "omar (round 3): ...".
    let reply = context
        .lines()
        .rev()
        .find_map(|l| {
            let (who, said) = l.split_once(": ")?;
            let speaker = who.split(" (round").next()?;
            (others.contains(&speaker) && !said.trim().is_empty()).then(|| {
                let first = said
                    .split(". ")
                    .next()
                    .unwrap_or(said)
                    .trim_end_matches('.');
                format!("I heard {speaker} say \"{first}\", and I want to answer it.")
            })
        })
        .unwrap_or_else(|| "Nobody has spoken yet, so let me open.".to_string());
    let cost = 40 + (agent as u32 + 1) * 7 * round;
    let year = 2030 + (round + agent as u32) % 9;
    let position = match agent {
        0 => format!(
            "The seawall's section {round} would cost ${cost} million and protect 1,{round:03} homes by {year}."
        ),
        1 => format!(
            "A cheaper option for section {round} is dune restoration at ${} million, finished by {year}.",
            cost / 3
        ),
        _ => format!(
            "In round {round} I propose that no household in zone {round} is moved before a relocation fund of ${} million exists.",
            cost / 5
        ),
    };
    format!("{reply} {position} That is my position in round {round}.")
}

async fn llm(
    http: &reqwest::Client,
    agent: usize,
    round: u32,
    context: &str,
) -> Result<String, String> {
    let base = std::env::var("STRATA_RUNNER_BASE_URL").map_err(|e| e.to_string())?;
    let model = std::env::var("STRATA_RUNNER_MODEL").unwrap_or_else(|_| "default".into());
    let (name, persona) = AGENTS[agent];
    let mut req = http.post(format!("{}/chat/completions", base.trim_end_matches('/'))).json(&json!({
        "model": model,
        "temperature": 0.7,
        "max_tokens": 160,
        "messages": [
            {"role": "system", "content": format!("You are {name}, {persona}, in a city council debate about coastal flooding. Reply with 2-4 sentences, refer to what others said in earlier rounds by name and round, and state one concrete number.")},
            {"role": "user", "content": format!("Round {round}. The debate so far (compressed):\n\n{context}\n\nYour turn, {name}.")},
        ],
    }));
    if let Ok(key) = std::env::var("OPENAI_API_KEY") {
        req = req.bearer_auth(key);
    }
    let v: Value = req
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    v["choices"][0]["message"]["content"]
        .as_str()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("no text in the model's reply: {v}"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args();
    let http = reqwest::Client::new();
    let with_auth = |r: reqwest::RequestBuilder| match &a.token {
        Some(t) => r.bearer_auth(t),
        None => r,
    };
    let use_llm = std::env::var("STRATA_RUNNER_BASE_URL").is_ok();
    let health = http.get(format!("{}/healthz", a.url)).send().await;
    if !health.is_ok_and(|r| r.status().is_success()) {
        return Err(format!(
            "no strata server at {} (start one with `strata serve`)",
            a.url
        )
        .into());
    }
    println!(
        "debate `{}`: {} agents, {} rounds, context budget {} tokens, agents: {}",
        a.debate,
        AGENTS.len(),
        a.rounds,
        a.budget,
        if use_llm { "LLM" } else { "scripted" }
    );
    println!(
        "{:>5} {:>14} {:>14} {:>8} {:>10}",
        "round", "context tok", "transcript tok", "ratio", "ms/turn"
    );
    let mut transcript = String::new();
    for round in 1..=a.rounds {
        let t0 = Instant::now();
        let mut used = 0usize;
        for (agent, (name, _)) in AGENTS.iter().enumerate() {
            let (context, tokens) = if round == 1 && agent == 0 {
                (String::new(), 0)
            } else {
                let r = with_auth(http.get(format!(
                    "{}/api/debates/{}/context/auto?budget={}",
                    a.url, a.debate, a.budget
                )))
                .send()
                .await?;
                let status = r.status();
                let v: Value = r.json().await?;
                if !status.is_success() {
                    return Err(format!("context failed ({status}): {v}").into());
                }
                (
                    v["text"].as_str().unwrap_or("").to_string(),
                    v["tokens"].as_u64().unwrap_or(0) as usize,
                )
            };
            used = used.max(tokens);
            let text = if use_llm {
                llm(&http, agent, round, &context).await?
            } else {
                scripted(agent, round, &context)
            };
            let r = with_auth(http.post(format!("{}/api/debates/{}/turns", a.url, a.debate)))
                .json(&json!({"round": round, "speaker": name, "text": text}))
                .send()
                .await?;
            if !r.status().is_success() {
                return Err(format!("append failed: {}", r.text().await?).into());
            }
            transcript.push_str(&format!("{name} (round {round}): {text}\n"));
        }
        let full = strata::token::count(&transcript);
        println!(
            "{round:>5} {used:>14} {full:>14} {:>7.0}% {:>10.1}",
            100.0 * used as f64 / full.max(1) as f64,
            t0.elapsed().as_secs_f64() * 1000.0 / AGENTS.len() as f64
        );
    }
    let q = with_auth(http.post(format!("{}/api/debates/{}/query-rlm", a.url, a.debate)))
        .json(&json!({"query": "What relocation fund did yuki propose for zone 3?"}))
        .send()
        .await?
        .json::<Value>()
        .await?;
    println!(
        "\nquery: What relocation fund did yuki propose for zone 3?\nanswer: {}",
        q["answer"]
    );
    if let Some(c) = q["citations"].get(0) {
        println!(
            "cited: {} [{}..{}) round {} {}",
            c["source"], c["start"], c["end"], c["round"], c["speaker"]
        );
    }
    Ok(())
}
