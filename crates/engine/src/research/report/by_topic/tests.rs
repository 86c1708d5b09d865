use super::quotes::{holds_a_detail, on_the_section};
use super::*;

fn part(number: usize, text: &str) -> Part {
    Part {
        number,
        text: text.to_owned(),
    }
}

fn planned(heading: &str, question: &str) -> Planned {
    Planned {
        heading: heading.to_owned(),
        question: question.to_owned(),
    }
}

#[test]
fn each_source_goes_to_the_section_it_bears_on_and_an_off_topic_one_to_none() {
    let parts = [
        part(
            1,
            "The autovacuum daemon starts a worker every autovacuum_naptime seconds.",
        ),
        part(
            2,
            "The genetic query optimizer searches join orders with a genetic algorithm.",
        ),
        part(
            3,
            "pg_stat_user_tables shows when each table was last vacuumed by autovacuum.",
        ),
        part(
            4,
            "autovacuum_vacuum_threshold and autovacuum_vacuum_scale_factor decide when a \
             table is vacuumed.",
        ),
    ];
    let sections = [
        planned(
            "When autovacuum runs",
            "How often does the autovacuum daemon start a worker, and what threshold applies?",
        ),
        planned(
            "Monitoring vacuum",
            "Which statistics view shows when a table was last vacuumed?",
        ),
    ];
    let got = assign(&parts, &sections, "How does autovacuum work?");
    assert_eq!(got[0], [0]);
    assert!(got[1].is_empty(), "the GEQO page bears on no section");
    assert_eq!(
        got[2],
        [1],
        "the statistics page names autovacuum only in passing"
    );
    assert!(got[3].contains(&0), "{got:?}");
}

#[test]
fn a_source_that_answers_two_sections_is_given_to_both() {
    // pg-05 on the real model: the one page naming the thresholds, the naptime and the
    // workers went to the first section only, and the second said its question went
    // unanswered.
    let parts = [
        part(
            1,
            "autovacuum_vacuum_threshold and autovacuum_vacuum_scale_factor decide when a \
             table is vacuumed. autovacuum_max_workers sets how many workers run at once, \
             and autovacuum_naptime how often the launcher starts one.",
        ),
        part(
            2,
            "The genetic query optimizer searches join orders with a genetic algorithm.",
        ),
    ];
    let sections = [
        planned(
            "When a table is vacuumed",
            "Which thresholds decide when autovacuum vacuums a table?",
        ),
        planned(
            "Workers and naptime",
            "How many autovacuum workers run, and how often does the launcher start one?",
        ),
    ];
    let got = assign(&parts, &sections, "How does autovacuum work?");
    assert_eq!(got[0], [0, 1], "{got:?}");
    assert!(got[1].is_empty());
}

#[test]
fn a_source_that_names_none_of_the_questions_identifiers_goes_to_no_section() {
    // pg-01 on the real model: the cost-based vacuum delay page shares "default" and "value"
    // with a section on shared_buffers' default, and its sentences were written there.
    let parts = [
        part(
            1,
            "shared_buffers sets the memory used for shared buffers; its default value is 128MB.",
        ),
        part(
            2,
            "vacuum_cost_delay: its default value is zero, which disables the cost-based delay.",
        ),
    ];
    let sections = [planned(
        "The default value",
        "What is the default value of shared_buffers?",
    )];
    let question = "What is the default value of shared_buffers, and how large should it be?";
    let got = assign(&parts, &sections, question);
    assert_eq!(got[0], [0], "{got:?}");
    assert!(got[1].is_empty(), "{got:?}");
    // A question that names no identifier filters nothing.
    let got = assign(&parts, &sections, "What is the default value of a setting?");
    assert_eq!(got[1], [0], "{got:?}");
    assert_eq!(
        identifiers("Is TaskGroup in asyncio like WAL or shared_buffers in Python?"),
        ["TaskGroup", "shared_buffers"]
    );
}

#[test]
fn a_full_section_passes_a_source_to_its_next_best() {
    let parts: Vec<Part> = (1..=6)
        .map(|n| part(n, &format!("Autovacuum workers and statistics note {n}.")))
        .collect();
    let sections = [
        planned("Autovacuum workers", "How many autovacuum workers run?"),
        planned("Statistics", "Which statistics are kept?"),
    ];
    let got = assign(&parts, &sections, "How does autovacuum work?");
    let first = got.iter().filter(|a| a.contains(&0)).count();
    assert!(first <= SOURCES_PER_SECTION, "{got:?}");
}

#[test]
fn the_outline_gets_a_title_of_its_own_and_no_source_title_as_a_heading() {
    let question = "How does autovacuum decide when to vacuum a table?";
    let outline = Outline {
        title: "How does autovacuum decide when to vacuum a table?".into(),
        sections: vec![
            planned("## Thresholds", "Which settings trigger a vacuum?"),
            planned("25.1. Routine Vacuuming", "What is routine vacuuming?"),
            planned("Thresholds", "Again?"),
            planned("Monitoring", ""),
        ],
    };
    let got = tidy(outline, question, &["25.1. Routine Vacuuming"]);
    let headings: Vec<&str> = got.sections.iter().map(|s| s.heading.as_str()).collect();
    assert_eq!(headings, ["Thresholds", "Monitoring"]);
    assert_eq!(
        got.sections[1].question, "Monitoring",
        "a missing question is the heading"
    );
    assert_ne!(
        plain_words(&got.title),
        plain_words(question),
        "{}",
        got.title
    );
    assert_eq!(got.title, "Thresholds and Monitoring");
}

#[test]
fn without_an_outline_the_delegated_topics_are_the_sections() {
    let topics = vec![
        "Autovacuum thresholds. Find the settings.".to_owned(),
        "Monitoring vacuum progress".to_owned(),
    ];
    let subject = Subject {
        question: "How does autovacuum work?",
        brief: "",
        topics: &topics,
    };
    let got = from_topics(&subject);
    assert_eq!(got.sections.len(), 2);
    assert_eq!(got.sections[0].heading, "Autovacuum thresholds.");
    assert_eq!(got.sections[0].question, topics[0]);
    let none = Subject {
        question: "How does autovacuum work?",
        brief: "",
        topics: &[],
    };
    let one = from_topics(&none);
    assert_eq!(one.sections.len(), 1);
    assert_eq!(one.title, "What the sources say");
}

#[test]
fn a_sentence_cut_off_or_pointing_back_is_not_kept() {
    let got = readable(vec![
        "This makes it faster. [1]".into(),
        "Autovacuum starts a worker every minute. [1]".into(),
        "This is set by autovacuum_naptime. [1]".into(),
        "The options are: [2]".into(),
        "The passage describes vacuuming. [2]".into(),
        "Results come from asyncio.gather( [2]".into(),
        "VACUUM […] reclaims storage. [2]".into(),
    ]);
    assert_eq!(
        got,
        [
            "Autovacuum starts a worker every minute. [1]",
            "This is set by autovacuum_naptime. [1]"
        ]
    );
}

#[test]
fn a_sentence_an_earlier_section_says_is_not_said_again() {
    let mut said = Said::default();
    assert!(said.add("Autovacuum starts a worker every autovacuum_naptime seconds. [1]"));
    assert!(
        !said.add("The autovacuum daemon starts a worker every autovacuum_naptime seconds. [3]")
    );
    assert!(said.add("Autovacuum can be turned off per table with a storage parameter. [2]"));
}

#[test]
fn a_quotation_holds_a_number_or_a_name_the_question_does_not_name() {
    let asked = crate::lexical::names("What does a plain VACUUM do in PostgreSQL?");
    assert!(holds_a_detail(
        "autovacuum_naptime defaults to one minute. [2]",
        &asked
    ));
    assert!(holds_a_detail("The default is 128 megabytes. [1]", &asked));
    assert!(!holds_a_detail(
        "Each of these reasons dictates performing VACUUM operations of varying frequency. [4]",
        &asked
    ));
    assert!(!holds_a_detail(
        "In normal PostgreSQL operation, tuples are not physically removed. [1]",
        &asked
    ));
}

#[test]
fn a_quotation_is_on_its_sections_subject() {
    // Two quotations of the real model's runs: one on the section's question, one that a single
    // rare word ranked first on its page.
    let query = "When the autovacuum daemon decides to vacuum When does the autovacuum daemon \
                 decide to vacuum a table?";
    assert!(on_the_section(
        "Specifies a fraction of the table size to add to autovacuum_vacuum_threshold when \
         deciding whether to trigger a VACUUM [1].",
        query
    ));
    assert!(!on_the_section(
        "I/O timing information is displayed in pg_stat_database, by autovacuum for \
         auto-vacuums and auto-analyzes [5].",
        query
    ));
}

#[test]
fn a_sentence_about_another_identifier_is_not_about_the_question() {
    // pg-01 on the real model: the preset options page names shared_buffers once, and the
    // section written from it described its other settings.
    let wanted = identifiers("What does shared_buffers control, and how large should it be?");
    assert!(!about_the_question(
        "The server_version_num setting reports the version number of the server [2].",
        &wanted
    ));
    assert!(about_the_question(
        "Larger settings for shared_buffers usually require a larger max_wal_size [1].",
        &wanted
    ));
    assert!(about_the_question(
        "A reasonable start is 25% of memory [1].",
        &wanted
    ));
    assert!(about_the_question("block_size is 8192 bytes [2].", &[]));
    assert!(points_back(
        "It is always set to -1 on other platforms [2]."
    ));
    assert!(!points_back("Item pointers are six bytes [2]."));
}
