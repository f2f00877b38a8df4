//! The facts a summary must keep: numbers, dates, named entities.

use super::words::is_stopword;
use unicode_segmentation::UnicodeSegmentation;

/// Month names, lower case.
pub(crate) const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// The facts a sentence carries: numbers, dates and named entities, as they are written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    pub numbers: Vec<String>,
    pub dates: Vec<String>,
    pub entities: Vec<String>,
}

impl Facts {
    pub(crate) fn count(&self) -> usize {
        self.numbers.len() + self.dates.len() + self.entities.len()
    }
}

/// Extracts numbers ("1,200", "38%", "$1.2"), dates ("March 2031", "1862") and named
/// entities (runs of capitalised words not at the start of a sentence).
pub fn facts(sentence: &str) -> Facts {
    let mut f = Facts::default();
    let words: Vec<(usize, &str)> = if sentence.is_ascii() {
        super::ascii::word_bounds(sentence).collect()
    } else {
        sentence.split_word_bound_indices().collect()
    };
    let mut i = 0;
    let mut first_word = true;
    while i < words.len() {
        let (_, w) = words[i];
        let is_word = w.chars().any(|c| c.is_alphanumeric());
        if !is_word {
            i += 1;
            continue;
        }
        if w.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            let digits: String = w.chars().filter(|c| c.is_ascii_digit()).collect();
            let year = digits.len() == 4
                && w.len() == 4
                && (1000..=2999).contains(&digits.parse::<u32>().unwrap_or(0));
            if year {
                f.dates.push(w.to_string());
            } else {
                f.numbers.push(w.to_string());
            }
            first_word = false;
            i += 1;
            continue;
        }
        let capital = w.chars().next().is_some_and(char::is_uppercase);
        if !capital {
            // Neither a month nor a name: nothing to lower-case.
            first_word = false;
            i += 1;
            continue;
        }
        let lw = w.to_lowercase();
        if MONTHS.contains(&lw.as_str()) {
            // "March 2031", "March 3", "3 March": take the month and an adjacent number.
            let mut date = w.to_string();
            if let Some((_, next)) = words.get(i + 2)
                && next.chars().next().is_some_and(|c| c.is_ascii_digit())
            {
                date = format!("{w} {next}");
                i += 2;
            }
            f.dates.push(date);
            first_word = false;
            i += 1;
            continue;
        }
        if !first_word && !is_stopword(&lw) {
            // Greedy run of capitalised words ("Port Aldous Transit Authority").
            let mut j = i;
            let mut end = i;
            while j < words.len() {
                let (_, wj) = words[j];
                if wj.chars().next().is_some_and(char::is_uppercase) {
                    end = j;
                    j += 1;
                    if words.get(j).is_some_and(|(_, s)| *s == " ") {
                        j += 1;
                        continue;
                    }
                }
                break;
            }
            let start_off = words[i].0;
            let end_off = words[end].0 + words[end].1.len();
            f.entities.push(sentence[start_off..end_off].to_string());
            i = end + 1;
            first_word = false;
            continue;
        }
        first_word = false;
        i += 1;
    }
    f
}
