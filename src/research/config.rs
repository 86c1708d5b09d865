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

/// Every ODR knob (§1.1), with ODR's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResearchConfig {
    pub max_structured_output_retries: u32,
    pub allow_clarification: bool,
    pub max_concurrent_research_units: u32,
    pub search_api: SearchApi,
    pub max_researcher_iterations: u32,
    pub max_react_tool_calls: u32,
    pub summarization_model: String,
    pub summarization_model_max_tokens: u32,
    pub max_content_length: usize,
    pub research_model: String,
    pub research_model_max_tokens: u32,
    pub compression_model: String,
    pub compression_model_max_tokens: u32,
    pub final_report_model: String,
    pub final_report_model_max_tokens: u32,
    #[serde(default)]
    pub mcp_prompt: String,
    /// Pause after the brief for the user to approve, edit or reject the research plan.
    #[serde(default)]
    pub review_plan: bool,
    /// Results per search query (every engine).
    #[serde(default = "five")]
    pub search_max_results: u32,
    /// Comma-separated domains searches are limited to (empty: anywhere).
    #[serde(default)]
    pub search_include_domains: String,
    /// Comma-separated domains searches leave out.
    #[serde(default)]
    pub search_exclude_domains: String,
    /// Tavily's `topic`: general, news or finance.
    #[serde(default = "general")]
    pub tavily_topic: String,
    /// Tavily's `search_depth`: basic or advanced (advanced costs two credits a query).
    #[serde(default = "basic")]
    pub tavily_search_depth: String,
    /// The operator's corpus `search_api: "local"` searches (empty: the only one there is).
    #[serde(default)]
    pub corpus: String,
    /// Pages of at most this many characters are shown as they are, not summarised.
    #[serde(default = "verbatim_default")]
    pub verbatim_page_chars: usize,
    /// Page summaries one run may start; past it, pages are shown by their snippets.
    #[serde(default = "summaries_default")]
    pub max_page_summaries: u32,
    /// Pages longer than `verbatim_page_chars` summarised by the summarisation model (ODR); off,
    /// shown by their excerpts that bear on the query, with no model call.
    #[serde(default = "yes")]
    pub summarize_pages: bool,
    /// Each researcher's findings condensed by the compression model (ODR); off, they are the
    /// search results as the researcher was shown them, each cited, with no model call.
    #[serde(default = "yes")]
    pub compress_research: bool,
    /// How the final report is written (`ReportForm`).
    #[serde(default)]
    pub report_form: ReportForm,
    /// Which defaults fit the run's models (`ResearchProfile`).
    #[serde(default)]
    pub research_profile: ResearchProfile,
    /// The most characters of a researcher's prompt: past it, its older search results are
    /// shortened to their sources' openings (0: no limit, as ODR).
    #[serde(default)]
    pub researcher_context_chars: usize,
    /// What a question asked after the report does (`FollowUp`).
    #[serde(default)]
    pub follow_up: FollowUp,
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

fn yes() -> bool {
    true
}

/// The shortest excerpts of a page worth showing: a few sentences.
const MIN_EXCERPT_CHARS: usize = 200;

fn verbatim_default() -> usize {
    2000
}

fn summaries_default() -> u32 {
    100
}

fn five() -> u32 {
    5
}

fn general() -> String {
    "general".into()
}

fn basic() -> String {
    "basic".into()
}

impl Default for ResearchConfig {
    fn default() -> Self {
        Self {
            max_structured_output_retries: 3,
            allow_clarification: true,
            max_concurrent_research_units: 5,
            search_api: SearchApi::Tavily,
            max_researcher_iterations: 6,
            max_react_tool_calls: 10,
            summarization_model: "openai:gpt-4.1-mini".into(),
            summarization_model_max_tokens: 8192,
            max_content_length: 50_000,
            research_model: "openai:gpt-4.1".into(),
            research_model_max_tokens: 10_000,
            compression_model: "openai:gpt-4.1".into(),
            compression_model_max_tokens: 8192,
            final_report_model: "openai:gpt-4.1".into(),
            final_report_model_max_tokens: 10_000,
            mcp_prompt: String::new(),
            review_plan: false,
            search_max_results: 5,
            search_include_domains: String::new(),
            search_exclude_domains: String::new(),
            tavily_topic: general(),
            tavily_search_depth: basic(),
            corpus: String::new(),
            verbatim_page_chars: verbatim_default(),
            max_page_summaries: summaries_default(),
            summarize_pages: true,
            compress_research: true,
            report_form: ReportForm::Whole,
            research_profile: ResearchProfile::Auto,
            researcher_context_chars: 0,
            follow_up: FollowUp::Auto,
        }
    }
}

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
/// takes. `validate` checks the same ranges, so the form and the check cannot disagree.
pub struct Setting {
    pub name: &'static str,
    pub description: &'static str,
    /// Inclusive bounds of a number.
    pub range: Option<(u64, u64)>,
    /// The values a choice takes.
    pub choices: &'static [&'static str],
}

const fn setting(name: &'static str, description: &'static str) -> Setting {
    Setting {
        name,
        description,
        range: None,
        choices: &[],
    }
}

const fn number(name: &'static str, description: &'static str, lo: u64, hi: u64) -> Setting {
    Setting {
        name,
        description,
        range: Some((lo, hi)),
        choices: &[],
    }
}

const TOKENS: (u64, u64) = (1, 200_000);

/// Every research setting, in `ResearchConfig`'s order.
pub const SETTINGS: [Setting; 31] = [
    number(
        "max_structured_output_retries",
        "Attempts per structured-output or tool-calling model call before the step fails.",
        1,
        10,
    ),
    setting(
        "allow_clarification",
        "Ask the user one clarifying question first when the request is ambiguous.",
    ),
    number(
        "max_concurrent_research_units",
        "Researchers one supervisor round may run at once (and topics a plan may have).",
        1,
        20,
    ),
    Setting {
        name: "search_api",
        description: "Where researchers search: Tavily, Exa, Brave Search, a self-hosted \
                      SearXNG, the research model's own web search (anthropic: Anthropic \
                      models; openai: OpenAI models, through the Responses API; google: Gemini \
                      models, Google Search grounding), the operator's local documents (local; \
                      see corpus), or nowhere.",
        range: None,
        choices: &[
            "tavily",
            "exa",
            "brave",
            "searxng",
            "anthropic",
            "openai",
            "google",
            "local",
            "none",
        ],
    },
    number(
        "max_researcher_iterations",
        "Supervisor model calls allowed: how many rounds of delegation.",
        1,
        10,
    ),
    number(
        "max_react_tool_calls",
        "Model calls allowed per researcher.",
        1,
        30,
    ),
    setting(
        "summarization_model",
        "Model that summarises each fetched page, as provider:model.",
    ),
    number(
        "summarization_model_max_tokens",
        "Output token limit of a page summary.",
        TOKENS.0,
        TOKENS.1,
    ),
    number(
        "max_content_length",
        "Characters of a page kept before it is summarised.",
        1000,
        200_000,
    ),
    setting(
        "research_model",
        "Model for clarifying, the brief, the plan, the supervisor and the researchers, as \
         provider:model.",
    ),
    number(
        "research_model_max_tokens",
        "Output token limit of the research model's calls.",
        TOKENS.0,
        TOKENS.1,
    ),
    setting(
        "compression_model",
        "Model that condenses each researcher's findings, as provider:model.",
    ),
    number(
        "compression_model_max_tokens",
        "Output token limit of the condensed findings.",
        TOKENS.0,
        TOKENS.1,
    ),
    setting(
        "final_report_model",
        "Model that writes the final report, as provider:model.",
    ),
    number(
        "final_report_model_max_tokens",
        "Output token limit of the final report.",
        TOKENS.0,
        TOKENS.1,
    ),
    setting(
        "mcp_prompt",
        "Extra instructions for the researchers (Open Deep Research's mcp_prompt).",
    ),
    setting(
        "review_plan",
        "Pause after the brief so the user approves, edits or rejects the planned topics \
         before any research is paid for.",
    ),
    number(
        "search_max_results",
        "Results per search query (every search engine).",
        1,
        20,
    ),
    setting(
        "search_include_domains",
        "Domains searches are limited to, comma-separated (e.g. \"arxiv.org, nature.com\"); \
         empty searches everywhere. Subdomains count.",
    ),
    setting(
        "search_exclude_domains",
        "Domains searches leave out, comma-separated.",
    ),
    Setting {
        name: "tavily_topic",
        description: "Tavily's search category.",
        range: None,
        choices: &["general", "news", "finance"],
    },
    Setting {
        name: "tavily_search_depth",
        description: "Tavily's search depth: advanced finds more relevant passages and costs two \
                      credits a query.",
        range: None,
        choices: &["basic", "advanced"],
    },
    setting(
        "corpus",
        "The operator's document collection searched when search_api is local (empty: the \
         only one the server has).",
    ),
    number(
        "verbatim_page_chars",
        "Pages (or document sections) of at most this many characters are shown to the \
         researchers as they are instead of being summarised; 0 summarises every page.",
        0,
        50_000,
    ),
    number(
        "max_page_summaries",
        "Page summaries one run may start; past it, pages are shown by their snippets \
         (0: never summarise).",
        0,
        1000,
    ),
    setting(
        "summarize_pages",
        "Have the summarisation model summarise each page longer than verbatim_page_chars \
         (true, as Open Deep Research does). False shows such a page by its excerpts instead: \
         its opening and the passages that share the most words with the query, \
         verbatim_page_chars characters in all, without a model call (for a slow local model, \
         whose summaries also drop facts).",
    ),
    setting(
        "compress_research",
        "Have the compression model condense each researcher's findings (true, as Open Deep \
         Research does). False hands the writer the search results as the researcher was \
         shown them, each cited, without that call: for a model whose condensed findings \
         cannot be used (a small local model's nearly always fall back to the results).",
    ),
    Setting {
        name: "report_form",
        description: "How the report is written: whole (one call of the report model writes \
                      it from all the findings, as Open Deep Research does), by_source (a \
                      short call restates each source's findings, only the sentences that \
                      source supports are kept, under a paragraph that answers the question) \
                      or by_topic (an outline of a few sections; each is written by a short \
                      call from the sources that bear on it and checked against them, under an \
                      answer drawn from the sections' checked sentences: for a small local \
                      model, which drops half the facts of findings it is given all at once).",
        range: None,
        choices: &["whole", "by_source", "by_topic"],
    },
    Setting {
        name: "research_profile",
        description: "Which defaults fit the models: auto (small when a model of the run is on \
                      a provider marked local, else standard), small (report_form by_topic, \
                      compress_research and summarize_pages false, researcher_context_chars \
                      16000, each unless the run or the operator sets it) \
                      or standard (the settings as given).",
        range: None,
        choices: &["auto", "small", "standard"],
    },
    number(
        "researcher_context_chars",
        "The most characters of a researcher's prompt: past it, its older search results are \
         shortened to their sources' openings (the newest stay whole; the report reads them \
         whole). 0: no limit, as Open Deep Research.",
        0,
        1_000_000,
    ),
    Setting {
        name: "follow_up",
        description: "What a question on a thread whose report is written does: auto (answered \
                      in a few cited sentences from the report's sources when they support an \
                      answer, else researched again, as is a request to research further), \
                      answer (always answered from those sources, saying when they cannot) or \
                      research (a new brief, the sources kept, as Open Deep Research does). \
                      Under auto and research the earlier question asked again (a cron on the \
                      thread) is researched afresh, its report ending with what changed.",
        range: None,
        choices: &["auto", "answer", "research"],
    },
];

/// The bounds `SETTINGS` gives a number setting.
fn bounds(field: &str) -> (u64, u64) {
    SETTINGS
        .iter()
        .find(|s| s.name == field)
        .and_then(|s| s.range)
        .unwrap_or((0, u64::MAX))
}

fn range(field: &str, value: u64) -> Result<(), String> {
    let (lo, hi) = bounds(field);
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "config.configurable.{field}: must be between {lo} and {hi}, got {value}"
        ))
    }
}

impl ResearchConfig {
    /// Checks ranges, enums and model strings; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        range(
            "max_structured_output_retries",
            self.max_structured_output_retries.into(),
        )?;
        range(
            "max_concurrent_research_units",
            self.max_concurrent_research_units.into(),
        )?;
        range(
            "max_researcher_iterations",
            self.max_researcher_iterations.into(),
        )?;
        range("max_react_tool_calls", self.max_react_tool_calls.into())?;
        range("max_content_length", self.max_content_length as u64)?;
        for (field, model, tokens) in self.models() {
            ModelName::parse(model).map_err(|e| format!("config.configurable.{field}: {e}"))?;
            range(&format!("{field}_max_tokens"), tokens.into())?;
        }
        range("search_max_results", self.search_max_results.into())?;
        range("verbatim_page_chars", self.verbatim_page_chars as u64)?;
        range("max_page_summaries", self.max_page_summaries.into())?;
        range(
            "researcher_context_chars",
            self.researcher_context_chars as u64,
        )?;
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
        for (field, value) in [
            ("tavily_topic", &self.tavily_topic),
            ("tavily_search_depth", &self.tavily_search_depth),
        ] {
            let choices = SETTINGS
                .iter()
                .find(|s| s.name == field)
                .map_or(&[][..], |s| s.choices);
            if !choices.contains(&value.as_str()) {
                return Err(format!(
                    "config.configurable.{field}: must be one of {}, got '{value}'",
                    choices.join(", ")
                ));
            }
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
