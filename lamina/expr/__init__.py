"""Row predicates: build (``col("id") >= 10``) or parse (``"id >= 10"``, any Spark SQL boolean
expression: ``"lower(s) LIKE 'a%' AND id + 1 > 18"``), bind, filter, prune (docs/expressions.md).

Typical flow::

    expr = bind(to_expr(where), schema)       # InvalidPredicate on bad input
    keep = may_match(expr, manifest, schema, spec)  # which files to read
    table.filter(to_arrow_filter(expr))       # which rows to return
"""

from lamina.expr.binder import bind
from lamina.expr.compile import evaluation_error, filter_rows, is_evaluation_failure
from lamina.expr.evaluator import may_match, predicate_may_fail, pushdown_filter, to_arrow_filter
from lamina.expr.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    Compare,
    Expr,
    ExprVisitor,
    In,
    IsNull,
    Lit,
    Not,
    NotIn,
    NotNull,
    Or,
    Predicate,
    Ref,
    and_,
    between,
    col,
    lit,
    negate,
    or_,
    referenced_columns,
    rewrite_not,
    to_sql,
    visit,
)
from lamina.expr.literals import coerce_literal
from lamina.expr.parser import conjuncts, parse_predicate, parse_term, to_expr

__all__ = [
    "AlwaysFalse",
    "AlwaysTrue",
    "And",
    "Compare",
    "Expr",
    "ExprVisitor",
    "In",
    "IsNull",
    "Lit",
    "Not",
    "NotIn",
    "NotNull",
    "Or",
    "Predicate",
    "Ref",
    "and_",
    "between",
    "bind",
    "coerce_literal",
    "col",
    "conjuncts",
    "evaluation_error",
    "filter_rows",
    "is_evaluation_failure",
    "lit",
    "may_match",
    "negate",
    "or_",
    "parse_predicate",
    "parse_term",
    "predicate_may_fail",
    "pushdown_filter",
    "referenced_columns",
    "rewrite_not",
    "to_arrow_filter",
    "to_expr",
    "to_sql",
    "visit",
]
