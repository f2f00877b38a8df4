use super::{Act, acts_of, asked_act, asks_for_set};

#[test]
fn set_questions_are_told_from_single_ones() {
    for q in [
        "Who changed position during the debate?",
        "List every deadline the committee agreed to",
        "Which speakers objected to the harbour levy proposal?",
        "How many votes were held on the tram extension?",
        "What deadlines did the members commit to?",
        "Which fare proposals did the members make?",
    ] {
        assert!(asks_for_set(q), "{q}");
    }
    for q in [
        "What did chen propose about fares?",
        "Who first disagreed with the tunnel option?",
        "Which speaker first proposed a referendum?",
        "What is the passphrase of the Velmora guild?",
        "In which year was the bridge built?",
        "What does the 2029 audit say?",
        "Did the council agree at all?",
        "How many daily riders did the 2027 study forecast?",
    ] {
        assert!(!asks_for_set(q), "{q}");
    }
}

#[test]
fn the_first_act_word_of_a_question_names_its_act() {
    let act = |q: &str| asked_act(q).map(|(a, _)| a);
    assert_eq!(
        act("Who changed their mind about the vote?"),
        Some(Act::Change)
    );
    assert_eq!(
        act("List every deadline the committee agreed to"),
        Some(Act::Commit)
    );
    assert_eq!(
        act("Which amendments were moved before the formal vote?"),
        Some(Act::Propose)
    );
    assert_eq!(
        act("Which speakers objected to the proposal?"),
        Some(Act::Object)
    );
    assert_eq!(
        act("How many votes were held on the levy?"),
        Some(Act::Decide)
    );
    assert_eq!(act("What share of households own a car?"), None);
    assert_eq!(
        asked_act("Who changed position during the debate?")
            .unwrap()
            .1,
        vec!["changed".to_string(), "position".to_string()]
    );
    assert_eq!(
        acts_of("I object to the levy, because it is unfair."),
        vec![Act::Object]
    );
    assert!(acts_of("I object to how cold it is in the room this morning.").is_empty());
    assert_eq!(
        acts_of("I have changed my position on the levy: I now propose 9 million."),
        vec![Act::Change]
    );
}

#[test]
fn replies_say_what_they_do_through_the_turn_before() {
    use super::{Reply, acts_through, called_act, reply_of};
    assert_eq!(reply_of("Aye."), Some(Reply::Answer { negative: false }));
    assert_eq!(
        reply_of("Nay, I cannot."),
        Some(Reply::Answer { negative: true })
    );
    assert_eq!(
        reply_of("And another one from me: a cap on fees."),
        Some(Reply::Continues)
    );
    // Not every "And …" goes on with the turn before.
    assert_eq!(reply_of("And yet the harbour froze that winter."), None);
    assert_eq!(
        reply_of("I agree with Ruth on the levy."),
        Some(Reply::Aligns)
    );
    assert_eq!(reply_of("I second that."), Some(Reply::Bare));
    assert_eq!(reply_of("The harbour froze that winter."), None);
    // The act a question puts to the room, before the others the turn names.
    let call = "The amendments are in. Shall we vote on the levy now?";
    assert_eq!(called_act(call), Some(Act::Decide));
    let call = "The levy is before us. Does anyone object to adopting it?";
    assert_eq!(called_act(call), Some(Act::Object));
    let no = Reply::Answer { negative: true };
    assert_eq!(acts_through(no, call, call), vec![Act::Support]);
    let objection = "I object to the levy; the harbour cannot carry it.";
    assert_eq!(
        acts_through(Reply::Aligns, objection, objection),
        vec![Act::Object]
    );
}

#[test]
fn stances_promises_and_changes_without_the_classic_verbs() {
    assert_eq!(
        acts_of("Raising the levy now is a mistake."),
        vec![Act::Object]
    );
    assert_eq!(
        acts_of("We will send the audited accounts to the committee by 4 October."),
        vec![Act::Commit]
    );
    // A forecast with a date is not a promise.
    assert!(acts_of("Revenue will reach $3 million by October.").is_empty());
    assert!(
        acts_of("I argued against the levy all spring, but today I back it.")
            .contains(&Act::Change)
    );
    // A negated act word asks for its opposite.
    assert_eq!(
        asked_act("Which members had no objection to the levy?").map(|(a, _)| a),
        Some(Act::Support)
    );
    assert!(asks_for_set("Who objected to the levy?"));
    assert!(!asks_for_set("Who first objected to the levy?"));
}

