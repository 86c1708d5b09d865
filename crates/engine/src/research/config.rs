//! The research knobs of Open Deep Research's `Configuration`, their validation, and how a run's
//! `configurable` overrides the operator's defaults (per-run settings win; locked keys do not move).

use crate::llm::ModelName;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Which search the researchers get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchApi {
    Tavily,
    Exa,
    Brave,
    /// A self-hosted SearXNG instance.
    Searxng,
    /// The research model's own server-side web search (Anthropic models).
    Anthropic,
    /// OpenAI's own web search, through the Responses API (OpenAI research models).
    Openai,
    /// Google Search grounding (Gemini research models).
    Google,
    /// One of the operator's local document corpora (`corpus` names which).
    Local,
    None,
}

impl SearchApi {
    /// The search engine behind the `{name}_search` tool, for the backends the service calls.
    pub fn engine(self) -> Option<crate::tools::Engine> {
        use crate::tools::Engine;
        match self {
            Self::Tavily => Some(Engine::Tavily),
            Self::Exa => Some(Engine::Exa),
            Self::Brave => Some(Engine::Brave),
            Self::Searxng => Some(Engine::Searxng),
            Self::Anthropic | Self::Openai | Self::Google | Self::Local | Self::None => None,
        }
    }

    /// Every search tool's name (see `tool_name`).
    pub const TOOL_NAMES: [&'static str; 5] = [
        "tavily_search",
        "exa_search",
        "brave_search",
        "searxng_search",
        "document_search",
    ];

    /// The search tool's name: ODR's `tavily_search`, and likewise for the other engines.
    pub fn tool_name(self) -> Option<&'static str> {
        match self {
            Self::Tavily => Some("tavily_search"),
            Self::Exa => Some("exa_search"),
            Self::Brave => Some("brave_search"),
            Self::Searxng => Some("searxng_search"),
            Self::Local => Some("document_search"),
            Self::Anthropic | Self::Openai | Self::Google | Self::None => None,
        }
    }
}

/// Which defaults fit the run's models. A 1.5B model on a CPU given ODR's defaults writes a
/// report from memory, loops, and copies its instructions back; the small-model profile
/// changes the settings below unless the run names them itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResearchProfile {
    /// Small when one of the run's models is on a provider marked `local = true`, else
    /// standard.
    #[default]
    Auto,
    /// `report_form = "by_topic"`, `compress_research = false`, `summarize_pages = false`,
    /// `researcher_context_chars = 16000`.
    Small,
    /// The settings as given (Open Deep Research's defaults where none are).
    Standard,
}

/// The settings the small-model profile changes (to the values `with_profile` gives them).
const SMALL_PROFILE: [&str; 4] = [
    "report_form",
    "compress_research",
    "summarize_pages",
    "researcher_context_chars",
];

/// The small profile's researcher prompt budget: about 4,000 tokens, which the 1.5B model
/// on two cores reads in under a minute.
const SMALL_CONTEXT_CHARS: usize = 16_000;

impl ResearchConfig {
    /// The profile this run runs with: `research_profile`, with `auto` decided by whether a
    /// model of the run is local (`is_local`).
    pub fn resolved_profile(&self, is_local: impl Fn(&ModelName) -> bool) -> ResearchProfile {
        match self.research_profile {
            ResearchProfile::Auto => {
                let local = self
                    .models()
                    .iter()
                    .filter_map(|(_, model, _)| ModelName::parse(model).ok())
                    .any(|m| is_local(&m));
                if local {
                    ResearchProfile::Small
                } else {
                    ResearchProfile::Standard
                }
            }
            chosen => chosen,
        }
    }

    /// The names of the settings whose values differ from `other`'s, in `SETTINGS` order.
    pub fn changed_from(&self, other: &Self) -> Vec<String> {
        let (Ok(Value::Object(mine)), Ok(Value::Object(theirs))) =
            (serde_json::to_value(self), serde_json::to_value(other))
        else {
            return Vec::new();
        };
        SETTINGS
            .iter()
            .filter(|s| mine.get(s.name) != theirs.get(s.name))
            .map(|s| s.name.to_owned())
            .collect()
    }

    /// This config under `profile`: the small profile's settings (`SMALL_PROFILE`) applied to
    /// every one of them that neither the run's `configurable` names nor the operator's
    /// configuration sets or locks (`operator_set`): a choice someone made wins.
    pub fn with_profile(
        mut self,
        profile: ResearchProfile,
        named: &Map<String, Value>,
        operator_set: &[String],
    ) -> Self {
        if profile != ResearchProfile::Small {
            return self;
        }
        for key in SMALL_PROFILE {
            if named.contains_key(key) || operator_set.iter().any(|k| k == key) {
                continue;
            }
            match key {
                "report_form" => self.report_form = ReportForm::ByTopic,
                "compress_research" => self.compress_research = false,
                "summarize_pages" => self.summarize_pages = false,
                "researcher_context_chars" => self.researcher_context_chars = SMALL_CONTEXT_CHARS,
                _ => {}
            }
        }
        self
    }
}

/// How the final report is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportForm {
    /// One call writes it from all the findings (Open Deep Research).
    #[default]
    Whole,
    /// Each source's findings restated by a short call of their own, checked against that
    /// source, under an overview paragraph (`by_source.rs`).
    BySource,
    /// An outline of a few sections, each written by a short call from the sources assigned
    /// to it and checked against them, under an answer drawn from those sections
    /// (`by_topic.rs`): for a small model.
    ByTopic,
}

/// What a message on a thread whose report is written does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FollowUp {
    /// Answered from the report's sources when they support an answer, else researched
    /// (and researched when the message asks for it: "research this further").
    #[default]
    Auto,
    /// Always answered from the report's sources; when they hold no answer, the reply says so.
    Answer,
    /// Always researched again, the sources gathered kept (Open Deep Research).
    Research,
}

/// Tavily's `topic`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TavilyTopic {
    General,
    News,
    Finance,
}

/// Tavily's `search_depth` (advanced costs two credits a query).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TavilyDepth {
    Basic,
    Advanced,
}

impl TavilyTopic {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::General => "general",
            Self::News => "news",
            Self::Finance => "finance",
        }
    }
}

impl TavilyDepth {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Basic => "basic",
            Self::Advanced => "advanced",
        }
    }
}

// The spellings serde reads (checked against it in the tests).
impl SettingType for SearchApi {
    const CHOICES: &'static [&'static str] = &[
        "tavily",
        "exa",
        "brave",
        "searxng",
        "anthropic",
        "openai",
        "google",
        "local",
        "none",
    ];
}
impl SettingType for ReportForm {
    const CHOICES: &'static [&'static str] = &["whole", "by_source", "by_topic"];
}
impl SettingType for ResearchProfile {
    const CHOICES: &'static [&'static str] = &["auto", "small", "standard"];
}
impl SettingType for FollowUp {
    const CHOICES: &'static [&'static str] = &["auto", "answer", "research"];
}
impl SettingType for TavilyTopic {
    const CHOICES: &'static [&'static str] = &["general", "news", "finance"];
}
impl SettingType for TavilyDepth {
    const CHOICES: &'static [&'static str] = &["basic", "advanced"];
}

/// The shortest excerpts of a page worth showing: a few sentences.
const MIN_EXCERPT_CHARS: usize = 200;

/// Keys of `configurable` that are not research knobs but are allowed (ids the server adds and
/// ODR's per-run keys).
const PASSTHROUGH: [&str; 9] = [
    "run_id",
    "thread_id",
    "graph_id",
    "assistant_id",
    "checkpoint_id",
    "checkpoint_ns",
    "user_id",
    "apiKeys",
    "mcp_config",
];

/// One setting as clients see it (`/assistants/{id}/schemas`): what it does, and the values it
/// takes. Made by `research_settings!` from the declaration `validate` checks, so the form and
/// the check cannot disagree.
pub struct Setting {
    pub name: &'static str,
    description: &'static str,
    /// Inclusive bounds of a number.
    pub range: Option<(u64, u64)>,
    /// The values a choice takes.
    pub choices: &'static [&'static str],
}

impl Setting {
    pub fn description(&self) -> &'static str {
        // Each doc line of the declaration starts with a space.
        self.description.trim_start()
    }
}

/// The values a setting's type takes, for its schema and the check of a run's value: none
/// listed for numbers, booleans and text.
pub trait SettingType {
    const CHOICES: &'static [&'static str] = &[];
}

impl SettingType for u32 {}
impl SettingType for usize {}
impl SettingType for bool {}
impl SettingType for String {}

fn range(field: &str, value: u64, (lo, hi): (u64, u64)) -> Result<(), String> {
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "config.configurable.{field}: must be between {lo} and {hi}, got {value}"
        ))
    }
}

/// Declares every research setting once: its field with type and default, what it does (the
/// doc comment, which clients are shown), and a number's range. From that come
/// `ResearchConfig`, its `Default`, `SETTINGS` and `check_ranges`.
macro_rules! research_settings {
    ($(
        $(#[doc = $doc:literal])+
        $name:ident: $ty:ty = $default:expr $(, range $lo:literal ..= $hi:literal)?;
    )+) => {
        /// Every research setting: Open Deep Research's knobs (§1.1) with its defaults, and this
        /// service's own.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct ResearchConfig {
            $( $(#[doc = $doc])+ pub $name: $ty, )+
        }

        impl Default for ResearchConfig {
            fn default() -> Self {
                Self { $( $name: $default, )+ }
            }
        }

        /// Every research setting, in `ResearchConfig`'s order.
        pub const SETTINGS: &[Setting] = &[$(
            Setting {
                name: stringify!($name),
                description: concat!($($doc),+),
                range: research_settings!(@range $($lo, $hi)?),
                choices: <$ty as SettingType>::CHOICES,
            },
        )+];

        impl ResearchConfig {
            /// Each number within its declared range; the error names the field.
            fn check_ranges(&self) -> Result<(), String> {
                $( $( range(stringify!($name), self.$name as u64, ($lo, $hi))?; )? )+
                Ok(())
            }
        }
    };
    (@range $lo:literal, $hi:literal) => { Some(($lo, $hi)) };
    (@range) => { None };
}

research_settings! {
    /// Attempts per structured-output or tool-calling model call before the step fails.
    max_structured_output_retries: u32 = 3, range 1..=10;
    /// Ask the user one clarifying question first when the request is ambiguous.
    allow_clarification: bool = true;
    /// Researchers one supervisor round may run at once (and topics a plan may have).
    max_concurrent_research_units: u32 = 5, range 1..=20;
    /// Where researchers search: Tavily, Exa, Brave Search, a self-hosted SearXNG, the research
    /// model's own web search (anthropic: Anthropic models; openai: OpenAI models, through the
    /// Responses API; google: Gemini models, Google Search grounding), the operator's local
    /// documents (local; see corpus), or nowhere.
    search_api: SearchApi = SearchApi::Tavily;
    /// Supervisor model calls allowed: how many rounds of delegation.
    max_researcher_iterations: u32 = 6, range 1..=10;
    /// Model calls allowed per researcher.
    max_react_tool_calls: u32 = 10, range 1..=30;
    /// Model that summarises each fetched page, as provider:model.
    summarization_model: String = String::from("openai:gpt-4.1-mini");
    /// Output token limit of a page summary.
    summarization_model_max_tokens: u32 = 8192, range 1..=200_000;
    /// Characters of a page kept before it is summarised.
    max_content_length: usize = 50_000, range 1000..=200_000;
    /// Model for clarifying, the brief, the plan, the supervisor and the researchers, as
    /// provider:model.
    research_model: String = String::from("openai:gpt-4.1");
    /// Output token limit of the research model's calls.
    research_model_max_tokens: u32 = 10_000, range 1..=200_000;
    /// Model that condenses each researcher's findings, as provider:model.
    compression_model: String = String::from("openai:gpt-4.1");
    /// Output token limit of the condensed findings.
    compression_model_max_tokens: u32 = 8192, range 1..=200_000;
    /// Model that writes the final report, as provider:model.
    final_report_model: String = String::from("openai:gpt-4.1");
    /// Output token limit of the final report.
    final_report_model_max_tokens: u32 = 10_000, range 1..=200_000;
    /// Extra instructions for the researchers (Open Deep Research's mcp_prompt).
    mcp_prompt: String = String::new();
    /// Pause after the brief so the user approves, edits or rejects the planned topics before
    /// any research is paid for.
    review_plan: bool = false;
    /// Results per search query (every search engine).
    search_max_results: u32 = 5, range 1..=20;
    /// Domains searches are limited to, comma-separated (e.g. "arxiv.org, nature.com"); empty
    /// searches everywhere. Subdomains count.
    search_include_domains: String = String::new();
    /// Domains searches leave out, comma-separated.
    search_exclude_domains: String = String::new();
    /// Tavily's search category.
    tavily_topic: TavilyTopic = TavilyTopic::General;
    /// Tavily's search depth: advanced finds more relevant passages and costs two credits a
    /// query.
    tavily_search_depth: TavilyDepth = TavilyDepth::Basic;
    /// The operator's document collection searched when search_api is local (empty: the only
    /// one the server has).
    corpus: String = String::new();
    /// Pages (or document sections) of at most this many characters are shown to the
    /// researchers as they are instead of being summarised; 0 summarises every page.
    verbatim_page_chars: usize = 2000, range 0..=50_000;
    /// Page summaries one run may start; past it, pages are shown by their snippets (0: never
    /// summarise).
    max_page_summaries: u32 = 100, range 0..=1000;
    /// Have the summarisation model summarise each page longer than verbatim_page_chars (true,
    /// as Open Deep Research does). False shows such a page by its excerpts instead: its
    /// opening and the passages that share the most words with the query, verbatim_page_chars
    /// characters in all, without a model call (for a slow local model, whose summaries also
    /// drop facts).
    summarize_pages: bool = true;
    /// Have the compression model condense each researcher's findings (true, as Open Deep
    /// Research does). False hands the writer the search results as the researcher was shown
    /// them, each cited, without that call: for a model whose condensed findings cannot be
    /// used (a small local model's nearly always fall back to the results).
    compress_research: bool = true;
    /// How the report is written: whole (one call of the report model writes it from all the
    /// findings, as Open Deep Research does), by_source (a short call restates each source's
    /// findings, only the sentences that source supports are kept, under a paragraph that
    /// answers the question) or by_topic (an outline of a few sections; each is written by a
    /// short call from the sources that bear on it and checked against them, under an answer
    /// drawn from the sections' checked sentences: for a small local model, which drops half
    /// the facts of findings it is given all at once).
    report_form: ReportForm = ReportForm::Whole;
    /// Which defaults fit the models: auto (small when a model of the run is on a provider
    /// marked local, else standard), small (report_form by_topic, compress_research and
    /// summarize_pages false, researcher_context_chars 16000, each unless the run or the
    /// operator sets it) or standard (the settings as given).
    research_profile: ResearchProfile = ResearchProfile::Auto;
    /// The most characters of a researcher's prompt: past it, its older search results are
    /// shortened to their sources' openings (the newest stay whole; the report reads them
    /// whole). 0: no limit, as Open Deep Research.
    researcher_context_chars: usize = 0, range 0..=1_000_000;
    /// What a question on a thread whose report is written does: auto (answered in a few cited
    /// sentences from the report's sources when they support an answer, else researched again,
    /// as is a request to research further), answer (always answered from those sources,
    /// saying when they cannot) or research (a new brief, the sources kept, as Open Deep
    /// Research does). Under auto and research the earlier question asked again (a cron on
    /// the thread) is researched afresh, its report ending with what changed.
    follow_up: FollowUp = FollowUp::Auto;
}

impl ResearchConfig {
    /// Checks ranges, enums and model strings; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        self.check_ranges()?;
        for (field, model, _) in self.models() {
            ModelName::parse(model).map_err(|e| format!("config.configurable.{field}: {e}"))?;
        }
        if !self.summarize_pages && self.verbatim_page_chars < MIN_EXCERPT_CHARS {
            return Err(format!(
                "config.configurable.verbatim_page_chars: with summarize_pages false, pages are \
                 shown by excerpts of verbatim_page_chars characters: it must be at least \
                 {MIN_EXCERPT_CHARS} (got {})",
                self.verbatim_page_chars
            ));
        }
        if !self.corpus.trim().is_empty() && self.search_api != SearchApi::Local {
            return Err(format!(
                "config.configurable.corpus: a corpus is searched only with search_api 'local' \
                 (this run's search_api is '{}')",
                serde_json::to_value(self.search_api)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            ));
        }
        for (field, list) in [
            ("search_include_domains", &self.search_include_domains),
            ("search_exclude_domains", &self.search_exclude_domains),
        ] {
            if let Some(bad) = domains(list).into_iter().find(|d| !is_domain(d)) {
                return Err(format!(
                    "config.configurable.{field}: '{bad}' is not a domain (like example.org)"
                ));
            }
        }
        Ok(())
    }

    pub fn models(&self) -> [(&'static str, &str, u32); 4] {
        [
            (
                "summarization_model",
                &self.summarization_model,
                self.summarization_model_max_tokens,
            ),
            (
                "research_model",
                &self.research_model,
                self.research_model_max_tokens,
            ),
            (
                "compression_model",
                &self.compression_model,
                self.compression_model_max_tokens,
            ),
            (
                "final_report_model",
                &self.final_report_model,
                self.final_report_model_max_tokens,
            ),
        ]
    }

    /// This config with a run's `configurable` applied on top. Unknown keys are rejected (a typo
    /// must not silently fall back to a default), locked keys may not differ, values are
    /// type-checked and the result validated.
    pub fn with_overrides(
        &self,
        configurable: &Map<String, Value>,
        locked: &[String],
    ) -> Result<Self, String> {
        let mut merged = match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => return Err("internal: research config is not an object".into()),
        };
        for (key, value) in configurable {
            if PASSTHROUGH.contains(&key.as_str()) || key.starts_with("x-") {
                continue;
            }
            if !merged.contains_key(key) {
                return Err(format!("config.configurable.{key}: unknown setting"));
            }
            if locked.contains(key) && merged.get(key) != Some(value) {
                return Err(format!("config.configurable.{key}: locked by the operator"));
            }
            let value = read_setting(key, &merged[key], value)?;
            merged.insert(key.clone(), value);
        }
        let cfg: Self = serde_json::from_value(Value::Object(merged))
            .map_err(|e| format!("config.configurable: {e}"))?;
        cfg.validate()?;
        Ok(cfg)
    }
}

/// The domains of a comma-separated setting.
pub fn domains(list: &str) -> Vec<String> {
    list.split([',', ' ', '\n'])
        .map(|d| d.trim().trim_end_matches('/').to_ascii_lowercase())
        .filter(|d| !d.is_empty())
        .collect()
}

fn is_domain(d: &str) -> bool {
    let d = d.strip_prefix("*.").unwrap_or(d);
    d.contains('.')
        && d.len() <= 253
        && d.split('.').all(|label| {
            !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// One setting as a run gives it, read against its default: the string forms clients send
/// (`"5"`, `"false"`) where the default is a number or a boolean, as pydantic does for ODR;
/// domain lists as JSON lists; refused when of another kind or not one of its choices.
fn read_setting(key: &str, default: &Value, given: &Value) -> Result<Value, String> {
    let value = match (default, given) {
        (Value::String(_), Value::Array(items)) if items.iter().all(Value::is_string) => {
            Value::String(
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        }
        (Value::Number(_), Value::String(s)) => s
            .trim()
            .parse::<u64>()
            .map_or_else(|_| given.clone(), Value::from),
        (Value::Bool(_), Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Value::Bool(true),
            "false" | "0" | "no" => Value::Bool(false),
            _ => given.clone(),
        },
        _ => given.clone(),
    };
    let expected = match (default, &value) {
        (Value::Number(_), Value::Number(n)) if n.is_u64() => None,
        (Value::Number(_), _) => Some("a whole number"),
        (Value::Bool(_), Value::Bool(_)) => None,
        (Value::Bool(_), _) => Some("true or false"),
        (Value::String(_), Value::String(_)) => None,
        (Value::String(_), _) => Some("a string"),
        _ => None,
    };
    if let Some(expected) = expected {
        return Err(format!(
            "config.configurable.{key}: expected {expected}, got {value}"
        ));
    }
    let choices = SETTINGS
        .iter()
        .find(|s| s.name == key)
        .map_or(&[][..], |s| s.choices);
    match value.as_str() {
        Some(v) if !choices.is_empty() && !choices.contains(&v) => Err(format!(
            "config.configurable.{key}: must be one of {}, got '{v}'",
            choices.join(", ")
        )),
        _ => Ok(value),
    }
}

#[cfg(test)]
mod tests;
