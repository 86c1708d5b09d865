//! The PDF's fonts. DejaVu Sans (regular, bold, oblique) and DejaVu Sans Mono, read from the
//! system's fonts (Debian's `fonts-dejavu-core`), are embedded as subsets of the glyphs the
//! report uses: Greek, Cyrillic, arrows and mathematical signs are drawn, each glyph's width is
//! the font's own (lines wrap where they end and citation links sit on their markers), and a
//! ToUnicode map makes the text read back as written. Without those files the standard
//! Helvetica and Courier are used, which hold Windows-1252 only (anything else is `?`) and
//! whose widths are estimated.

use lopdf::{Dictionary, Document, Object, Stream, StringFormat, dictionary};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Where the fonts are looked for; `DEEP_RESEARCH_PDF_FONTS` names another directory.
const FONT_DIR: &str = "/usr/share/fonts/truetype/dejavu";

/// The four faces a report is set in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Font {
    Regular,
    Bold,
    Italic,
    Mono,
}

impl Font {
    pub(super) const ALL: [Font; 4] = [Self::Regular, Self::Bold, Self::Italic, Self::Mono];

    pub(super) fn index(self) -> usize {
        match self {
            Self::Regular => 0,
            Self::Bold => 1,
            Self::Italic => 2,
            Self::Mono => 3,
        }
    }

    pub(super) fn name(self) -> &'static str {
        ["F1", "F2", "F3", "F4"][self.index()]
    }
}

/// The files, in the order of `Font`'s faces.
const FILES: [&str; 4] = [
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSansMono.ttf",
];

/// The font files' bytes, read once per process (`None`: one is missing or unreadable).
fn font_files() -> Option<&'static [Vec<u8>; 4]> {
    static FILES_READ: OnceLock<Option<[Vec<u8>; 4]>> = OnceLock::new();
    FILES_READ
        .get_or_init(|| {
            let dir = std::env::var_os("DEEP_RESEARCH_PDF_FONTS")
                .map_or_else(|| PathBuf::from(FONT_DIR), PathBuf::from);
            let read = |name: &str| std::fs::read(dir.join(name)).ok();
            let [a, b, c, d] = FILES.map(read);
            let files = [a?, b?, c?, d?];
            // A file that does not parse is no font to draw with.
            files
                .iter()
                .all(|f| ttf_parser::Face::parse(f, 0).is_ok())
                .then_some(files)
        })
        .as_ref()
}

/// One embedded face: the glyphs used so far, under the ids they get in the subset.
struct Embedded {
    data: &'static [u8],
    face: ttf_parser::Face<'static>,
    remapper: subsetter::GlyphRemapper,
    /// Subset glyph id → the character it draws and its width (thousandths of an em).
    used: BTreeMap<u16, (char, u32)>,
}

impl Embedded {
    fn width(&self, c: char) -> f32 {
        let gid = self.face.glyph_index(c).unwrap_or(ttf_parser::GlyphId(0));
        self.advance(gid) as f32 / 1000.0
    }

    fn advance(&self, gid: ttf_parser::GlyphId) -> u32 {
        let units = u32::from(self.face.units_per_em().max(1));
        u32::from(self.face.glyph_hor_advance(gid).unwrap_or(0)) * 1000 / units
    }

    /// `text` as two-byte subset glyph ids (`Identity-H`), each glyph recorded.
    fn encode(&mut self, text: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len() * 2);
        for c in text.chars() {
            let gid = self.face.glyph_index(c).unwrap_or(ttf_parser::GlyphId(0));
            let new = self.remapper.remap(gid.0);
            let width = self.advance(gid);
            self.used.entry(new).or_insert((c, width));
            out.extend_from_slice(&new.to_be_bytes());
        }
        out
    }
}

/// The fonts of one PDF.
pub(super) struct Fonts {
    embedded: Option<Vec<Embedded>>,
}

impl Fonts {
    /// The embedded fonts when the system has them, else the standard ones.
    pub(super) fn load() -> Self {
        let embedded = font_files().and_then(|files| {
            files
                .iter()
                .map(|data| {
                    let face = ttf_parser::Face::parse(data, 0).ok()?;
                    Some(Embedded {
                        data,
                        face,
                        remapper: subsetter::GlyphRemapper::new(),
                        used: BTreeMap::new(),
                    })
                })
                .collect::<Option<Vec<_>>>()
        });
        Self { embedded }
    }

    /// The standard fonts whatever the system has (what a test of the fallback draws with).
    #[cfg(test)]
    pub(super) fn standard() -> Self {
        Self { embedded: None }
    }

    #[cfg(test)]
    pub(super) fn embeds(&self) -> bool {
        self.embedded.is_some()
    }

    /// A character's width in ems.
    pub(super) fn width(&self, font: Font, c: char) -> f32 {
        match &self.embedded {
            Some(faces) => faces[font.index()].width(c),
            None => estimated_width(font, c),
        }
    }

    /// `text` as a string operand in `font`.
    pub(super) fn encode(&mut self, font: Font, text: &str) -> Object {
        match &mut self.embedded {
            Some(faces) => {
                Object::String(faces[font.index()].encode(text), StringFormat::Hexadecimal)
            }
            None => Object::String(win_ansi(text), StringFormat::Literal),
        }
    }

    /// The font resources (`F1` … `F4`), written once every line is drawn (a subset holds
    /// the glyphs used).
    pub(super) fn write(self, doc: &mut Document) -> Result<Dictionary, String> {
        let mut fonts = Dictionary::new();
        match self.embedded {
            Some(faces) => {
                for (i, face) in faces.into_iter().enumerate() {
                    let name = FILES[i].trim_end_matches(".ttf");
                    let id = embed(doc, face, &subset_tag(i), name)?;
                    fonts.set(Font::ALL[i].name(), id);
                }
            }
            None => {
                let bases = [
                    "Helvetica",
                    "Helvetica-Bold",
                    "Helvetica-Oblique",
                    "Courier",
                ];
                for (i, base) in bases.iter().enumerate() {
                    let id = doc.add_object(dictionary! {
                        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => *base,
                        "Encoding" => "WinAnsiEncoding",
                    });
                    fonts.set(Font::ALL[i].name(), id);
                }
            }
        }
        Ok(fonts)
    }
}

/// The six capital letters a subset's name starts with (`AAAAAB+DejaVuSans`).
fn subset_tag(i: usize) -> String {
    format!("DRSUB{}", (b'A' + i as u8) as char)
}

/// One face as a Type 0 font over a CID font of its subset, with its widths and ToUnicode map.
fn embed(
    doc: &mut Document,
    face: Embedded,
    tag: &str,
    name: &str,
) -> Result<lopdf::ObjectId, String> {
    let subset = subsetter::subset(face.data, 0, &face.remapper)
        .map_err(|e| format!("font subset of {name}: {e:?}"))?;
    let base = format!("{tag}+{name}");
    let units = f32::from(face.face.units_per_em().max(1));
    let scaled = |v: i16| (f32::from(v) * 1000.0 / units).round() as i64;
    let bbox = face.face.global_bounding_box();
    let length = subset.len() as i64;
    let file = doc.add_object(Stream::new(dictionary! {"Length1" => length}, subset));
    let italic = face.face.is_italic();
    let descriptor = doc.add_object(dictionary! {
        "Type" => "FontDescriptor", "FontName" => base.clone(),
        // Non-symbolic, italic when it is.
        "Flags" => if italic { 32 + 64 } else { 32 },
        "FontBBox" => vec![scaled(bbox.x_min).into(), scaled(bbox.y_min).into(),
                           scaled(bbox.x_max).into(), scaled(bbox.y_max).into()],
        "ItalicAngle" => face.face.italic_angle().round() as i64,
        "Ascent" => scaled(face.face.ascender()),
        "Descent" => scaled(face.face.descender()),
        "CapHeight" => scaled(face.face.capital_height().unwrap_or(face.face.ascender())),
        "StemV" => 80,
        "FontFile2" => file,
    });
    let widths: Vec<Object> = face
        .used
        .iter()
        .flat_map(|(gid, (_, w))| {
            [
                Object::Integer(i64::from(*gid)),
                Object::Array(vec![Object::Integer(i64::from(*w))]),
            ]
        })
        .collect();
    let cid = doc.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "CIDFontType2", "BaseFont" => base.clone(),
        "CIDSystemInfo" => dictionary! {
            "Registry" => Object::string_literal("Adobe"),
            "Ordering" => Object::string_literal("Identity"), "Supplement" => 0,
        },
        "FontDescriptor" => descriptor, "CIDToGIDMap" => "Identity", "W" => widths,
    });
    let to_unicode = doc.add_object(Stream::new(dictionary! {}, to_unicode(&face.used)));
    Ok(doc.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type0", "BaseFont" => base,
        "Encoding" => "Identity-H", "DescendantFonts" => vec![cid.into()],
        "ToUnicode" => to_unicode,
    }))
}

/// The CMap that reads each subset glyph back as the character it was drawn for.
fn to_unicode(used: &BTreeMap<u16, (char, u32)>) -> Vec<u8> {
    let mut out = String::from(
        "/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n\
         /CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n\
         /CMapName /Adobe-Identity-UCS def\n/CMapType 2 def\n\
         1 begincodespacerange\n<0000> <FFFF>\nendcodespacerange\n",
    );
    let entries: Vec<(&u16, &char)> = used.iter().map(|(g, (c, _))| (g, c)).collect();
    // At most 100 entries a block, as the CMap format wants.
    for block in entries.chunks(100) {
        out.push_str(&format!("{} beginbfchar\n", block.len()));
        for (gid, c) in block {
            let mut units = [0u16; 2];
            let hex: String = c
                .encode_utf16(&mut units)
                .iter()
                .map(|u| format!("{u:04X}"))
                .collect();
            out.push_str(&format!("<{gid:04X}> <{hex}>\n"));
        }
        out.push_str("endbfchar\n");
    }
    out.push_str("endcmap\nCMapName currentdict /CMap defineresource pop\nend\nend\n");
    out.into_bytes()
}

/// A character's width in ems, near enough Helvetica's to wrap by (Courier's exactly).
fn estimated_width(font: Font, c: char) -> f32 {
    if font == Font::Mono {
        return 0.6;
    }
    // Rounded up from Helvetica's widths, so a wrapped line never runs past the margin.
    let w = match c {
        'i' | 'j' | 'l' | '.' | ',' | ';' | ':' | '\'' | '!' | '|' | ' ' => 0.28,
        'f' | 't' | 'r' | 'I' | '(' | ')' | '[' | ']' | '-' => 0.34,
        'm' | 'w' | 'M' | 'W' | '%' | '@' | '—' => 0.95,
        'A'..='Z' => 0.78,
        _ => 0.58,
    };
    if font == Font::Bold { w * 1.06 } else { w }
}

/// Text in the standard fonts' encoding (Windows-1252); what it cannot hold is `?`.
fn win_ansi(text: &str) -> Vec<u8> {
    text.chars()
        .map(|c| match c {
            ' '..='~' => c as u8,
            '\u{a0}'..='\u{ff}' => c as u32 as u8,
            '€' => 0x80,
            '‚' => 0x82,
            '„' => 0x84,
            '…' => 0x85,
            '‘' => 0x91,
            '’' => 0x92,
            '“' => 0x93,
            '”' => 0x94,
            '•' => 0x95,
            '–' => 0x96,
            '—' => 0x97,
            '™' => 0x99,
            _ => b'?',
        })
        .collect()
}
