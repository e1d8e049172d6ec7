"""Reading a query and matching it against chunks' text, at search time: what the query's parts are
(`reader`), which names it spells and whether it asks for a definition or for uses (`names`), which
definitions a chunk holds (`symbols`), and which messages its string literals print (`literals`). Pure
functions over strings; nothing here touches an index."""
