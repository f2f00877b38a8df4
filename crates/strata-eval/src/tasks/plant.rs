//! Facts to plant in a haystack: single needles, paraphrased ones, facts needed together,
//! and facts found only through another.

use super::Names;
use rand::Rng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;

/// A fact to plant: its sentence(s) and the question that asks for it.
pub struct Plant {
    pub task: &'static str,
    pub sentences: Vec<String>,
    pub question: String,
    pub answers: Vec<String>,
}

const ACTIVITIES: &[&str] = &[
    "eat a sandwich on the old harbour wall",
    "rent a rowing boat at dawn",
    "climb the clock tower after lunch",
    "swim in the cold quarry lake",
    "buy smoked fish at the night market",
    "watch the storks nest on the chimneys",
];
const OBJECTS: &[&str] = &[
    "hollow book",
    "ceramic owl",
    "flower pot",
    "tin of buttons",
    "cracked teapot",
    "brass lantern",
];
const MONTHS: &[&str] = &[
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
const INGREDIENTS: &[&str] = &[
    "saffron",
    "juniper",
    "smoked paprika",
    "fennel pollen",
    "black garlic",
    "sumac",
    "tamarind",
    "star anise",
    "sorrel",
    "cardamom",
];
const CODEWORDS: &[&str] = &[
    "amber", "falcon", "granite", "harbor", "juniper", "lantern", "meadow", "nickel", "orchid",
    "pepper",
];

/// A single fact about an invented subject.
pub fn single_fact(rng: &mut ChaCha8Rng, names: &mut Names) -> Plant {
    let name = names.fresh(rng);
    let (sentence, question, answer) = match rng.random_range(0..6) {
        0 => {
            let code = format!(
                "{}-{}",
                CODEWORDS.choose(rng).expect("codewords"),
                rng.random_range(1000..9999)
            );
            (
                format!("The secret passphrase of the {name} archive is {code}."),
                format!("What is the secret passphrase of the {name} archive?"),
                code,
            )
        }
        1 => {
            let a = ACTIVITIES.choose(rng).expect("activities").to_string();
            (
                format!("The best thing to do in {name} is to {a}."),
                format!("What is the best thing to do in {name}?"),
                a,
            )
        }
        2 => {
            let person = names.fresh(rng);
            let o = OBJECTS.choose(rng).expect("objects").to_string();
            (
                format!(
                    "Captain {person} hid the spare key to the {name} lighthouse inside a {o}."
                ),
                format!("Where did Captain {person} hide the spare key to the {name} lighthouse?"),
                o,
            )
        }
        3 => {
            let date = format!(
                "{} {}, {}",
                MONTHS.choose(rng).expect("months"),
                rng.random_range(1..=28),
                rng.random_range(1850..2020)
            );
            (
                format!("The {name} expedition reached the summit on {date}."),
                format!("When did the {name} expedition reach the summit?"),
                date,
            )
        }
        4 => {
            let mm = format!("{} millimetres", rng.random_range(200..3000));
            (
                format!("The annual rainfall recorded at the {name} observatory was {mm}."),
                format!("How much annual rainfall was recorded at the {name} observatory?"),
                mm,
            )
        }
        _ => {
            let person = names.fresh(rng);
            (
                format!("The {name} guild of weavers was founded by a tailor called {person}."),
                format!("Who founded the {name} guild of weavers?"),
                person,
            )
        }
    };
    Plant {
        task: "single_needle",
        sentences: vec![sentence],
        question,
        answers: vec![answer],
    }
}

const CITIES: &[&str] = &[
    "Reykjavik",
    "Valparaiso",
    "Tbilisi",
    "Windhoek",
    "Ulaanbaatar",
    "Hobart",
    "Tallinn",
    "Cusco",
    "Zanzibar",
    "Bergen",
    "Dubrovnik",
    "Ljubljana",
    "Asmara",
    "Lhasa",
    "Nuuk",
    "Trondheim",
    "Galway",
    "Porto",
    "Kraków",
    "Salzburg",
    "Bruges",
    "Lucerne",
    "Tangier",
    "Malmo",
    "Tartu",
    "Oaxaca",
    "Mendoza",
    "Cuenca",
    "Arequipa",
    "Hue",
    "Kandy",
    "Luang Prabang",
    "Hakodate",
    "Kanazawa",
    "Tromso",
    "Split",
    "Plovdiv",
    "Sibiu",
    "Kotor",
    "Gdansk",
];
const LENDS: &[(&str, &str)] = &[
    ("sewing machines", "sewing machines"),
    ("fishing rods", "fishing rods"),
    ("telescopes", "telescopes"),
    ("bread ovens", "bread ovens"),
    ("snowshoes", "snowshoes"),
    ("violins", "violins"),
];

/// The places paraphrase needles are about (each used once per haystack).
pub fn cities() -> Vec<&'static str> {
    CITIES.to_vec()
}

/// A fact about a real place in everyday words, asked with other words than the planted
/// sentence uses (synonyms, another construction): only the place name is shared, and
/// real text may mention the place too.
pub fn paraphrase_fact(rng: &mut ChaCha8Rng, cities: &mut Vec<&'static str>) -> Option<Plant> {
    if cities.is_empty() {
        return None;
    }
    let city = cities.swap_remove(rng.random_range(0..cities.len()));
    let (sentence, question, answer) = match rng.random_range(0..4) {
        0 => {
            let a = ACTIVITIES.choose(rng).expect("activities").to_string();
            (
                format!("The best thing to do in {city} is to {a}."),
                format!("What should a visitor to {city} make sure not to miss?"),
                a,
            )
        }
        1 => {
            let (thing, _) = LENDS.choose(rng).expect("lends");
            (
                format!("The public library in {city} lends {thing} to anyone with a card."),
                format!("What can people borrow from the {city} library?"),
                thing.to_string(),
            )
        }
        2 => {
            let m = MONTHS.choose(rng).expect("months").to_string();
            (
                format!(
                    "Every year the harvest festival of {city} begins on the first Sunday of {m}."
                ),
                format!("When does the annual {city} harvest celebration start?"),
                m,
            )
        }
        _ => {
            let o = OBJECTS.choose(rng).expect("objects").to_string();
            (
                format!("The mayor of {city} keeps the town seal inside a {o}."),
                format!("Where is the {city} town seal stored by its mayor?"),
                o,
            )
        }
    };
    Some(Plant {
        task: "needle_paraphrase",
        sentences: vec![sentence],
        question,
        answers: vec![answer],
    })
}

/// Three facts about one subject, all of which the answer needs.
pub fn multi_fact(rng: &mut ChaCha8Rng, names: &mut Names) -> Plant {
    let name = names.fresh(rng);
    let mut pool: Vec<&str> = INGREDIENTS.to_vec();
    pool.shuffle(rng);
    let picked: Vec<String> = pool[..3].iter().map(|s| s.to_string()).collect();
    Plant {
        task: "multi_needle",
        sentences: picked
            .iter()
            .map(|i| format!("One of the three secret ingredients of the {name} stew is {i}."))
            .collect(),
        question: format!("What are the three secret ingredients of the {name} stew?"),
        answers: picked,
    }
}

/// Two facts linked by a name the question does not contain: the second is only found
/// through the first.
pub fn hop_fact(rng: &mut ChaCha8Rng, names: &mut Names) -> Plant {
    let dish = names.fresh(rng);
    let chef = names.fresh(rng);
    let village = names.fresh(rng);
    Plant {
        task: "multi_hop",
        sentences: vec![
            format!("The {dish} pie was first baked by a chef called {chef}."),
            format!("{chef} grew up in the mountain village of {village}."),
        ],
        question: format!("In which village did the chef who first baked the {dish} pie grow up?"),
        answers: vec![village],
    }
}
