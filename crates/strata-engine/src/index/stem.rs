//! The `en_stem` analyzer with its stems remembered: tantivy's own (simple tokenizer, long
//! tokens removed, lower-cased, English Snowball stemmer), but a word already stemmed on
//! this thread is looked up, not stemmed again. A build indexes every level of every
//! chunk, and the same few thousand words make up most of them: stemming was ~7 % of the
//! offline build's CPU. The terms are the same (a test holds them to tantivy's analyzer),
//! so an index written with either reads with the other.

use std::cell::RefCell;
use std::collections::HashMap;
use tantivy::tokenizer::{
    LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer, Token, TokenFilter, TokenStream,
    Tokenizer,
};

/// Stems a thread keeps before it starts again (a long build meets rare words forever).
const KEPT: usize = 1 << 16;

thread_local! {
    static STEMS: RefCell<HashMap<String, String, foldhash::fast::RandomState>> =
        RefCell::new(HashMap::default());
}

/// The analyzer registered as `en_stem` on every index strata opens.
pub(super) fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(RememberedStemmer)
        .build()
}

/// tantivy's `Stemmer::new(Language::English)`, remembering its stems per thread.
#[derive(Clone)]
struct RememberedStemmer;

impl TokenFilter for RememberedStemmer {
    type Tokenizer<T: Tokenizer> = Filter<T>;

    fn transform<T: Tokenizer>(self, tokenizer: T) -> Filter<T> {
        Filter { inner: tokenizer }
    }
}

#[derive(Clone)]
struct Filter<T> {
    inner: T,
}

impl<T: Tokenizer> Tokenizer for Filter<T> {
    type TokenStream<'a> = Stream<T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        Stream {
            tail: self.inner.token_stream(text),
            stemmer: None,
        }
    }
}

struct Stream<T> {
    tail: T,
    /// Made at the first word this thread has not stemmed yet.
    stemmer: Option<frostem::Stemmer>,
}

impl<T: TokenStream> TokenStream for Stream<T> {
    fn advance(&mut self) -> bool {
        if !self.tail.advance() {
            return false;
        }
        let token = self.tail.token_mut();
        let stemmer = &mut self.stemmer;
        STEMS.with_borrow_mut(|stems| {
            if let Some(s) = stems.get(token.text.as_str()) {
                token.text.clear();
                token.text.push_str(s);
                return;
            }
            let stemmer =
                stemmer.get_or_insert_with(|| frostem::Stemmer::new(frostem::Algorithm::English));
            let stem = stemmer.stem(&token.text).into_owned();
            if stems.len() >= KEPT {
                stems.clear();
            }
            stems.insert(std::mem::replace(&mut token.text, stem.clone()), stem);
        });
        true
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(a: &mut TextAnalyzer, text: &str) -> Vec<(String, usize, usize, usize)> {
        let mut out = Vec::new();
        let mut s = a.token_stream(text);
        while s.advance() {
            let t = s.token();
            out.push((t.text.clone(), t.offset_from, t.offset_to, t.position));
        }
        out
    }

    #[test]
    fn remembered_stems_are_tantivys_en_stem_terms() {
        let mut texts = crate::sample_documents();
        texts.push(
            "Généralement, les États-Unis: running RUNS ran runner's Ünïcödé 42,000 x".into(),
        );
        texts.push(format!("{} {}", "a".repeat(45), "b".repeat(39)));
        let mut theirs = tantivy::tokenizer::TokenizerManager::default()
            .get("en_stem")
            .expect("tantivy's en_stem");
        let mut ours = analyzer();
        // Twice: the second reading comes from the remembered stems.
        for _ in 0..2 {
            for t in &texts {
                assert_eq!(terms(&mut ours, t), terms(&mut theirs, t));
            }
        }
    }
}
