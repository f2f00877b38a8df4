//! The generated debate the end-to-end benches share: `rounds` rounds among four speakers
//! of proposals, figures, dates, votes and objections, deterministic in a seed.

use strata::source::Turn;

pub const SPEAKERS: [&str; 4] = ["alice", "bob", "chen", "dana"];

/// A 64-bit linear congruential generator (Knuth's MMIX constants): deterministic, no deps.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len() as u64) as usize]
    }
}

const PEOPLE: [&str; 12] = [
    "Mayor Okafor",
    "Janet Pruitt",
    "Dr. Lena Vasquez",
    "Councillor Brandt",
    "Tomás Reyes",
    "Priya Raman",
    "the State Comptroller",
    "Commissioner Haldane",
    "Marcus Webb",
    "Aiko Tanaka",
    "Judge Ellery",
    "Professor Nwosu",
];
const PLACES: [&str; 10] = [
    "Eastgate",
    "Millbrook",
    "the Harbour district",
    "Calder Heights",
    "Old Quay",
    "Northfield",
    "Canal Street",
    "Westmoor",
    "Aldous Central",
    "the airport corridor",
];
const TOPICS: [&str; 12] = [
    "light rail",
    "bus rapid transit",
    "the tunnel option",
    "fare caps",
    "parking levies",
    "the federal grant",
    "construction mitigation",
    "the referendum",
    "bike lanes",
    "the depot site",
    "night service",
    "accessibility upgrades",
];
const ORGS: [&str; 8] = [
    "PARTA",
    "the finance committee",
    "Kessling & Partners",
    "the Chamber of Commerce",
    "the riders' union",
    "the port authority",
    "the state transport board",
    "the university's transit lab",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

fn sentence(r: &mut Lcg, round: u32, speaker: &str) -> String {
    let n = r.below(90) + 5;
    let big = r.below(1900) + 100;
    let year = 2024 + r.below(15);
    let p = r.pick(&PEOPLE);
    let pl = r.pick(&PLACES);
    let t = r.pick(&TOPICS);
    let t2 = r.pick(&TOPICS);
    let o = r.pick(&ORGS);
    let m = r.pick(&MONTHS);
    let prev = round.saturating_sub(1 + r.below(5) as u32).max(1);
    let other = r.pick(&SPEAKERS);
    match r.below(14) {
        0 => format!(
            "{p} told the committee that ridership in {pl} rose by {n}% between {} and {year}.",
            year - 3
        ),
        1 => format!(
            "According to {o}, {t} would cost ${big} million over {} years.",
            r.below(20) + 5
        ),
        2 => format!(
            "I disagree with {other} on {t}: the figures from round {prev} simply do not add up."
        ),
        3 => format!(
            "Our own estimate puts daily riders at {} by {year}, not the {} that {o} keeps quoting.",
            big * 30,
            big * 20
        ),
        4 => format!(
            "If we wait until {m} {year}, the federal share falls from {}% to {n}%.",
            n + 10
        ),
        5 => format!(
            "{p} of {o} proposed a pilot of {t} with {} vehicles on route {}.",
            n / 3 + 2,
            r.below(90) + 1
        ),
        6 => format!(
            "The question of {t} is really about {t2}, and {speaker} has said so since round {prev}."
        ),
        7 => format!(
            "Let me remind everyone that {p}'s report logged {big} complaints from {pl} last year."
        ),
        8 => format!(
            "We should cap the budget for {t} at ${n}.{} million and publish quarterly reports.",
            r.below(10)
        ),
        9 => format!(
            "On {m} {}, {year}, {o} will present revised numbers for {pl}.",
            r.below(28) + 1
        ),
        10 => format!(
            "I accept {other}'s point about {t}, but {pl} still needs service every {} minutes.",
            r.below(12) + 3
        ),
        11 => format!(
            "A survey of {big} households in {pl} found that {n}% would use {t} at least weekly."
        ),
        12 => format!("Frankly, {t} without {t2} is a half measure, and {pl} deserves better."),
        _ => format!(
            "The motion on {t} passed {}-{} in the {o} vote on {m} {}.",
            r.below(5) + 4,
            r.below(4),
            r.below(28) + 1
        ),
    }
}

pub fn turn_text(r: &mut Lcg, round: u32, speaker: &str) -> String {
    let k = 4 + r.below(5);
    (0..k)
        .map(|_| sentence(r, round, speaker))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `rounds` rounds × 4 speakers of JSON Lines, deterministic in `seed`.
pub fn generate_debate(rounds: u32, seed: u64) -> String {
    let mut r = Lcg(seed);
    let mut out = String::new();
    for round in 1..=rounds {
        for speaker in SPEAKERS {
            let t = Turn {
                round,
                speaker: speaker.to_string(),
                text: turn_text(&mut r, round, speaker),
                time: None,
            };
            out.push_str(&serde_json::to_string(&t).expect("json"));
            out.push('\n');
        }
    }
    out
}
