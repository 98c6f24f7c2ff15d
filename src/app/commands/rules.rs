//! `nnlint rules` and `nnlint explain`.

use super::super::cli::{RulesArgs, RulesFormat};
use super::super::Outcome;
use crate::error::{Error, Result};
use crate::rules;
use crate::util::suggest::suggest;
use crate::util::table::{Align, Table};

pub fn list(args: &RulesArgs) -> Result<Outcome> {
    let metas = rules::all_meta();
    let text = match args.format {
        RulesFormat::Json => {
            let mut s = serde_json::to_string_pretty(metas).expect("rule metadata serialises");
            s.push('\n');
            s
        }
        RulesFormat::Markdown => rules::catalog(),
        RulesFormat::Table => {
            let mut t = Table::plain(&[Align::Left; 5]).squeeze_column(4);
            for m in metas {
                t.push(vec![
                    m.code.clone(),
                    m.name.clone(),
                    m.category.clone(),
                    m.severity.to_string(),
                    m.summary.clone(),
                ]);
            }
            t.render_fitting(super::super::terminal::width())
        }
    };
    Ok(Outcome::clean(text))
}

pub fn explain(rule: &str) -> Result<Outcome> {
    match rules::find(rule) {
        Some(r) => Ok(Outcome::clean(rules::explain(r.meta()))),
        None => {
            let names: Vec<&str> = rules::all_meta().iter().map(|m| m.name.as_str()).collect();
            Err(Error::Usage(suggest(
                &format!("no rule '{rule}'"),
                rule,
                &names,
            )))
        }
    }
}
